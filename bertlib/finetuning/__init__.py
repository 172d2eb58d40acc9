"""Notebook 07, fine-tuning on toxic comments: splits without leaks (split), padded batches (batching), the
classifier with its tokenizer and thresholds (classifier), metrics, the TF-IDF baseline, a fairness check, the
recipe, the whole run behind `python -m bertlib.finetune` (run), `python -m bertlib.predict` (predict), and whether
pretraining paid off over repeated splits and seeds (payoff).
"""

from bertlib.basics import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "baseline": ("TfidfBaseline",),
    "batching": ("CommentDataset", "PadCollator"),
    "classifier": ("CLASSIFIER_FILE", "empty_positions", "ToxicityClassifier"),
    "fairness": ("IDENTITY_TERMS", "mentions", "identity_false_positive_rates"),
    "metrics": ("as_2d", "MIN_POSITIVES_TO_TUNE", "tune_thresholds", "untuned_labels", "untuned_reasons",
                "TOO_FEW_POSITIVES", "TOO_FEW_NEGATIVES", "METRICS", "evaluate", "with_intervals", "confusion_matrices",
                "confident_mistakes"),
    "payoff": ("Arm", "Split", "repeated_splits", "compare_arms", "time_comparison", "Gain", "paired_gain",
               "control_key", "welch_interval"),
    "predict": ("EMPTY", "Comments", "read_comments", "score", "escaped_controls"),
    "recipe": ("FineTuneConfig", "FineTuneResult", "FineTuneTime", "make_batch_sampler", "load_classifier",
               "fine_tune", "time_fine_tune", "fit_baseline"),
    "run": ("RunConfig", "RunResult", "json_safe", "FineTuneError", "FIXED_FINETUNE_ARGS", "SETTINGS_FILE",
            "data_sha256", "run_settings", "check_resume", "resolve_init", "data_source", "run_finetune",
            "check_args"),
    "split": ("PARTS", "stratified_split", "part_sizes", "train_val_test_split", "Duplicates",
              "drop_duplicate_texts", "PreparedComments", "prepare_comments"),
})
