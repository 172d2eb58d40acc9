"""The notebooks' plumbing: the session a notebook opens (session), the setup cell and launch badges (setup_cell),
the header under each title (headers), the headless runner behind `python -m bertlib.course` (runner), the shared
figures (plots), d2l's code (d2l_loader) and the course as a website (site). Free of torch until a notebook uses it.
"""

from bertlib.basics import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "d2l_loader": ("D2L_VERSION", "INSTALL_COMMAND", "D2L_DEPENDENCIES", "PLACEHOLDER_NAMES",
                   "TorchvisionPlaceholder", "load_d2l", "loaded_without_torchvision"),
    "headers": ("RUN_TIMES_FILE", "WORDS_PER_MINUTE", "BADGE_MARK", "HEADER_MARK", "Entry", "CATALOG", "notebook_key",
                "notebooks_folder", "read_run_times", "record_run_time", "reported_device", "has_gpu_cell",
                "Reading", "minutes_for", "FOLDED_BLOCK", "is_folded_code", "reading_words", "header_source",
                "rewrite_header"),
    "plots": ("ArrayLike", "to_numpy", "FIGURE_DPI", "use_course_style", "draw_heatmap", "heatmap", "heatmaps",
              "attention_heatmaps", "input_representation_diagram", "encoder_layer_diagram", "bert_stack_diagram",
              "multihead_diagram", "mlm_masking_diagram", "classification_head_diagram"),
    "runner": ("notebook_paths", "run_notebook", "freeze_progress_bars", "check_headers", "record_full_run",
               "failure_status"),
    "session": ("SMOKE", "PACKAGE", "REPO_ROOT", "IN_CHECKOUT", "PRETRAINED_HUB_NAME", "PRETRAINED_HINT", "pick",
                "gpu_minutes", "GPU_MINUTES_VARIABLE", "device", "notebooks_dir", "NOTEBOOKS", "COLAB_CONTENT",
                "COLAB_ARTIFACTS", "DRIVE_MOUNT", "DRIVE_ARTIFACTS", "ON_DRIVE", "KAGGLE_ARTIFACTS", "KAGGLE_INPUT",
                "ArtifactsError", "host", "artifacts_root", "artifacts_dir", "on_drive", "carry_over",
                "bring_in_saved_versions", "survives_disconnect", "gpu_cell_plan",
                "missing_from", "SHOW_COMMENTS", "OWN_EXAMPLE",
                "comments_shown", "hidden_comments_line", "fold_comments", "data_summary",
                "pretrained_bert_source", "checkpoint_name", "pretrained_file", "needs", "fold", "show"),
    "setup_cell": ("REPOSITORY", "PROTECTED", "NO_DEPS", "SETUP_MARK", "FOLDED", "setup", "cell_source", "colab_url",
                   "host_pins", "InstallFailed", "pip_failure", "install_requirements", "install",
                   "notebooks_to_set_up", "setup_cell_of", "badges_source", "set_up", "set_up_files", "write_notebooks",
                   "stale_notebooks"),
    "site": ("MARKER", "BADGE_IMAGES", "SCREENSHOT_PAGES", "SiteError", "badge_svg", "stage", "check_site",
             "build_site", "screenshots"),
})
