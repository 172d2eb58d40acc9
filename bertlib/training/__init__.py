"""The training loop pretraining and fine-tuning share: the Trainer and its TrainingConfig, and its pieces: the
batches, the step log, the update, the checkpoint writer, resuming, Ctrl-C, several processes; the optimizer's
parameter groups, the schedule, mixed precision, random states, devices, batch samplers, the logged history,
checkpoints, the run lock, the time budget that fixes a step count and the deadline that re-fits it.
"""

from bertlib.basics import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "checkpoint": ("CHECKPOINT_FORMAT", "CheckpointError", "DiskFullError", "OutDirError", "process_alive",
                   "remove_orphaned_temp_files", "check_out_dir", "checkpoint_name", "checkpoint_step",
                   "list_checkpoints", "latest_checkpoint", "save_checkpoint", "load_checkpoint",
                   "load_latest_checkpoint", "set_aside", "prune_checkpoints"),
    "config": ("FIXED_ON_RESUME", "TrainingConfig"),
    "devices": ("local_rank", "world_size", "pick_device"),
    "history": ("History",),
    "lock": ("LOCK_NAME", "OWNER_SUFFIX", "RunLockedError", "RunLock"),
    "optimizer": ("param_groups",),
    "precision": ("Precision", "PRECISIONS", "NATIVE_BF16", "native_bf16", "has_tf32", "tf32_matmuls",
                  "resolve_precision", "precision_line", "autocast", "loss_scaler"),
    "rng": ("rng_state", "set_rng_state", "seed_everything", "forked_rng"),
    "sampling": ("BatchSampler", "RandomBatchSampler", "length_grouped_batches", "LengthGroupedBatchSampler",
                 "sequential_batches"),
    "schedule": ("linear_warmup_decay", "noam_schedule", "schedule_at", "Relaid"),
    "deadline": ("FLOOR_STRETCH", "Deadline", "Refit", "steps_that_fit"),
    "time_budget": ("StepBudget", "check_seconds", "steps_in_budget", "time_steps", "fit_steps_to_budget"),
    "trainer": ("MetricsFn", "NonFiniteLossError", "Trainer"),
    "batches": ("Batch", "EXAMPLES", "TOKENS", "BatchStream", "HeldOutBatches", "target_counts",
                "loss_terms"),
    "checkpoint_writer": ("CheckpointWriter",),
    "evaluation": ("held_out_scores",),
    "interrupt": ("StopRequests", "interrupted_line"),
    "step_log": ("BadStep", "StepLog"),
    "update": ("Update", "adamw"),
})
