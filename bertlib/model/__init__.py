"""Notebooks 03-05, the model: BertConfig, the input embeddings, multi-head attention, the encoder and its heads
(bert), and weights in and out of the transformers format (hf).
"""

from bertlib.basics import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "attention": ("padding_mask", "eager_attention", "MultiHeadSelfAttention"),
    "bert": ("BertOutput", "PreTrainingOutput", "ClassifierOutput", "FeedForward", "EncoderLayer",
             "BertPreTrainedModel", "BertModel", "MLMHead", "BertForPreTraining", "BertForSequenceClassification"),
    "config": ("AttentionImpl", "PositionKind", "ProblemType", "PROBLEM_TYPES", "BertConfig"),
    "embeddings": ("sinusoidal_table", "BertEmbeddings"),
    "hf": ("WEIGHT_FILES", "TOKENIZER_FILES", "WeightsReport", "hf_names", "looks_local", "resolve", "read_json",
           "read_state_dict", "load_hf_state_dict", "from_pretrained", "to_hf_state_dict", "save_pretrained"),
})
