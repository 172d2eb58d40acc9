"""The data every notebook reads: strict file readers (files), the toxic comments and where they come from
(comments), their labels, pretraining documents (corpus, wikitext) and the Hugging Face hub (hub). Imports no torch.
"""

from bertlib.basics import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "comments": ("JIGSAW_REPO", "JIGSAW_FILE", "KAGGLE_DIR", "Task", "TASKS", "LoadReport", "CommentData",
                 "SourceKind", "CommentsSource", "locate_comments", "find_comments", "load_comments",
                 "load_kaggle_test", "kaggle_test_file", "load_kaggle_unscored", "load_comment_lines",
                 "read_jigsaw_parquet", "jigsaw_file", "jigsaw_comments"),
    "corpus": ("Document", "Corpus", "load_corpus", "load_imdb", "load_csv_column", "comments_to_corpus"),
    "files": ("SAMPLE_COMMENTS", "SAMPLE_CORPUS", "sample_dir", "DataError", "shown_path", "read_bytes",
              "decode_text", "read_csv_records"),
    "hub": ("HUB_REVISION", "unreadable", "hub_problem", "hub_file", "parquet_module", "open_parquet"),
    "labels": ("LABELS", "COLUMNS", "ANY_TOXIC", "LABEL_TASKS", "label_matrix", "task_labels", "positive_weights"),
    "wikitext": ("WIKITEXT_REPO", "WIKITEXT_FOLDER", "WIKITEXT_FILES", "detokenize_wikitext", "wikitext_articles",
                 "wikitext_documents"),
})
