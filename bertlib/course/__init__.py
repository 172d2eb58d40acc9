"""The notebooks' plumbing: the session a notebook opens (session), the setup cell (setup_cell), the headless runner
behind `python -m bertlib.course` (runner), the shared figures (plots) and d2l's code (d2l_loader). Free of torch
until a notebook uses it.
"""

from bertlib.basics import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "d2l_loader": ("D2L_VERSION", "INSTALL_COMMAND", "D2L_DEPENDENCIES", "PLACEHOLDER_NAMES",
                   "TorchvisionPlaceholder", "load_d2l", "loaded_without_torchvision"),
    "plots": ("ArrayLike", "to_numpy", "HEATMAP_DPI", "draw_heatmap", "heatmap", "heatmaps", "attention_heatmaps",
              "input_representation_diagram", "encoder_layer_diagram", "bert_stack_diagram", "multihead_diagram",
              "mlm_masking_diagram", "classification_head_diagram"),
    "runner": ("notebook_paths", "run_notebook", "freeze_progress_bars", "failure_status"),
    "session": ("SMOKE", "PACKAGE", "REPO_ROOT", "IN_CHECKOUT", "PRETRAINED_HUB_NAME", "PRETRAINED_HINT", "pick",
                "device", "notebooks_dir", "NOTEBOOKS", "COLAB_ARTIFACTS", "KAGGLE_ARTIFACTS", "ArtifactsError",
                "host", "artifacts_root", "artifacts_dir", "keep_hint", "data_summary", "setup",
                "pretrained_bert_source", "checkpoint_name", "pretrained_file", "needs", "show"),
    "setup_cell": ("REPOSITORY", "PROTECTED", "NO_DEPS", "cell_source", "colab_url", "host_pins", "InstallFailed",
                   "pip_failure", "install_requirements", "install", "notebooks_to_set_up", "setup_cell_of",
                   "write_notebooks"),
})
