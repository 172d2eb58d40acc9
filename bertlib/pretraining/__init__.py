"""Notebook 06, pretraining: sentence pairs for NSP (nsp), masking for MLM (mlm), packed windows (packing), which
text to read (sources), the yardsticks a masked-LM is scored against, the whole run behind
`python -m bertlib.pretrain` (run, cli), and more MLM on a task's own text before fine-tuning (adapt).
"""

from bertlib.basics import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "mlm": ("SpecialIds", "vocabulary", "MaskingCollator", "pretraining_metrics", "fill_mask"),
    "nsp": ("tokenize_sentences", "PretrainingInstance", "truncate_pair", "instances_from_document",
            "create_instances_from_ids", "tokenize_documents", "create_instances", "PretrainingDataset"),
    "packing": ("packed_windows", "PackedDataset"),
    "run": ("PROG", "DEFAULT_STEPS", "PROBE_STEPS", "FIXED_PRETRAIN_ARGS", "RECIPES", "BEFORE_RECIPES",
            "PretrainArgs", "apply_recipe", "PretrainError", "check_resume", "recorded_steps", "resolve_steps",
            "load_texts", "run_tokenizer", "check_vocabulary", "build_datasets", "check_batches", "run_pretraining",
            "FinishedRun", "load_finished_run", "pretraining_flops"),
    "adapt": ("adapt_to_task", "adapted_start"),
    "sources": ("PretrainingSource", "PRETRAINING_SOURCES", "CorpusUnavailableError", "describe_pretraining_corpus",
                "pretraining_corpus", "kaggle_comment_documents", "KAGGLE_CPU_DOCUMENTS", "cpu_run_corpus_flags"),
    "yardsticks": ("Guessers", "wilson_interval", "MaskedScores", "score_masked_positions", "FUNCTION_WORDS",
                   "function_word_blanks", "blanks_answered"),
})
