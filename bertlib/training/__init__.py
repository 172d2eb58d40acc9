"""The training loop pretraining and fine-tuning share, in seven modules, each one idea, each importing only those
above it:

    config       TrainingConfig: everything that decides how a run trains, stored in every checkpoint
    hardware     the device, mixed precision and TF32, torch.compile, several processes, fused AdamW
    batches      seeded batch streams, batch samplers (random, length-grouped, bucket widths), random states
    checkpoints  checkpoint files, atomic saves, the background writer, the run lock, the rules of a resume
    budget       the learning-rate schedule and the time budget: the deadline that re-fits the last step
    trainer      the Trainer: the loop and its step, the step log (NaN handling), evaluation, Ctrl-C, its history
    probe        how many steps fit in a time budget: a short timed run of a throwaway copy, before the real one
"""

from bertlib.basics import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "config": ("FIXED_ON_RESUME", "TrainingConfig", "Precision", "PRECISIONS"),
    "hardware": ("local_rank", "world_size", "pick_device", "NATIVE_BF16", "native_bf16", "has_tf32", "tf32_matmuls",
                 "resolve_precision", "precision_line", "autocast", "loss_scaler", "adamw"),
    "batches": ("rng_state", "set_rng_state", "seed_everything", "forked_rng", "BatchSampler", "RandomBatchSampler",
             "length_grouped_batches", "LengthGroupedBatchSampler", "sequential_batches", "Batch", "EXAMPLES",
             "TOKENS", "BatchStream", "HeldOutBatches", "target_counts", "loss_terms"),
    "checkpoints": ("CHECKPOINT_FORMAT", "CheckpointError", "DiskFullError", "OutDirError", "process_alive",
                    "remove_orphaned_temp_files", "check_out_dir", "checkpoint_name", "checkpoint_step",
                    "list_checkpoints", "latest_checkpoint", "save_checkpoint", "load_checkpoint",
                    "load_latest_checkpoint", "set_aside", "prune_checkpoints", "LOCK_NAME", "OWNER_SUFFIX",
                    "RunLockedError", "RunLock", "CheckpointWriter"),
    "budget": ("linear_warmup_decay", "noam_schedule", "schedule_at", "Relaid", "FLOOR_STRETCH", "Deadline", "Refit",
               "steps_that_fit"),
    "trainer": ("History", "param_groups", "MetricsFn", "NonFiniteLossError", "Trainer", "held_out_scores",
                "StopRequests", "BadStep", "StepLog", "Update"),
    "probe": ("StepBudget", "check_seconds", "steps_in_budget", "time_steps", "fit_steps_to_budget"),
})
