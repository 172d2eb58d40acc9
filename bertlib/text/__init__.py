"""Notebooks 01-02, text to token ids: cleaning raw comments, splitting sentences, WordPiece (the encoder,
the trainer that learns a vocabulary, and the fast Rust tokenizer the later notebooks use). Imports no torch.
"""

from bertlib.basics import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "cleaning": ("PLACEHOLDERS", "is_invisible", "is_pictograph", "remove_invisible", "strip_html", "replace_urls",
                 "replace_emails", "replace_ips", "remove_emoji", "normalise_whitespace", "lowercase", "Step",
                 "STEPS", "STEP_NAMES", "trace", "clean_text", "StepStats", "CleaningReport", "clean_texts"),
    "fast_tokenizer": ("REQUIRED_SPECIAL_TOKENS", "SURROGATES", "load_tokenizer", "check_texts", "encode_texts"),
    "sentences": ("split_sentences",),
    "wordpiece": ("SPECIAL_TOKENS", "is_control", "is_whitespace", "is_punctuation", "is_cjk", "BasicTokenizer",
                  "Encoding", "truncate_longest_first", "WordPieceTokenizer", "save_vocab"),
    "wordpiece_trainer": ("Score", "SCORES", "Merge", "PairScore", "word_counts", "WordPieceTrainer", "merge_in",
                          "train_wordpiece"),
})
