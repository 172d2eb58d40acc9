"""The yardstick a fine-tuned BERT has to beat: TF-IDF n-grams and one logistic regression per label.

Word 1-2-grams and character 2-5-grams (sublinear TF, accents stripped) feed a one-vs-rest logistic
regression, all as one scikit-learn Pipeline: the classic strong baseline of the Jigsaw competition
(reported at about 0.974 mean ROC-AUC on its test set). A label with a single class in the training data
predicts that class (OneVsRestClassifier's constant predictor).

Leaves out: NB-SVM features and hyper-parameter search.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from bertlib.finetuning.metrics import as_2d
from bertlib.text.fast_tokenizer import check_texts


class TfidfBaseline:
    """TF-IDF of word 1-2-grams and character 2-5-grams, one logistic regression per label."""

    def __init__(self, max_features: int = 50_000, C: float = 4.0, seed: int = 0):
        self.max_features, self.C, self.seed = max_features, C, seed

    def fit(self, texts: Sequence[str], labels: Any) -> TfidfBaseline:
        """Fit the vectorizers and the per-label regressions on (texts, (rows, labels) 0/1)."""
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.multiclass import OneVsRestClassifier
        from sklearn.pipeline import FeatureUnion, Pipeline

        def tfidf(analyzer: str, ngrams: tuple[int, int]) -> TfidfVectorizer:
            return TfidfVectorizer(analyzer=analyzer, ngram_range=ngrams, sublinear_tf=True,
                                   max_features=self.max_features, strip_accents="unicode")

        labels = as_2d(labels).astype(np.int64)
        self.pipeline = Pipeline([
            ("features", FeatureUnion([("words", tfidf("word", (1, 2))), ("chars", tfidf("char_wb", (2, 5)))])),
            ("classify", OneVsRestClassifier(LogisticRegression(C=self.C, solver="liblinear",
                                                                random_state=self.seed))),
        ])
        # A one-column target would be taken for a binary problem with two probability columns: pad it
        # with its complement so every task is a label-indicator matrix, and drop that column again later.
        self._single = labels.shape[1] == 1
        target = np.hstack([labels, 1 - labels]) if self._single else labels
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Label .* is present in all training examples")
            self.pipeline.fit(check_texts(texts), target)
        return self

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """(texts, labels) probabilities."""
        probs = self.pipeline.predict_proba(check_texts(texts))
        return probs[:, :1] if self._single else probs
