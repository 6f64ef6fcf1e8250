"""The contracts of docs/contracts.md as literal lists, written out in full on purpose (see tests/test_contracts.py):
a test that compared the output with the code's own PLAN_KEYS would pass when two keys swapped places."""

RUN_KEYS = (
    "name", "nnodes", "nproc_per_node", "world_size", "per_device_batch_size", "grad_accum_steps",
    "global_batch_size", "batch_scale", "scaling", "lr", "warmup_steps", "samples_per_rank", "padded_samples",
    "dropped_samples", "steps_per_epoch", "total_steps", "notes",
    "min_nnodes", "seed", "dataset_size", "epochs", "max_steps", "optimizer", "drop_last",
)  # fmt: skip
LAUNCH_KEYS = ("module", "script", "args", "env", "max_restarts", "noise_scale", "observe", "workdir")  # run.json
RUN_JSON_FIELDS = (
    "schema_version", "run_id", "name", "status", "plan", "launch", "argv", "env_added", "started_at", "ended_at",
    "wall_time_s", "exit_code", "failed_ranks", "hostname", "python", "torch_version", "experiment_file",
    "experiment_file_sha256", "restarts", "timeout_s", "supervisor_pid", "observe", "observed",
    "metrics_from_observations", "findings", "prediction", "resumes", "previous_wall_time_s", "previous_restarts",
    "group_rank",
)  # fmt: skip
OBSERVED_KEYS = (
    "world_size", "processes", "data_parallel_size", "per_device_batch_size", "grad_accum_steps", "global_batch_size",
    "ranges",
    "optimizer_steps", "samples_seen", "lr_first", "lr_peak", "lr_last", "lr_base", "sampler", "sampler_chain",
    "distinct_samples_across_ranks", "batchnorm_layers", "batchnorm_synchronized", "amp", "backend", "device", "ddp",
    "initial_params_fingerprint", "optimizer",
    "time_breakdown", "model_state",
    "frameworks", "numerics",
    "tokens_per_micro_batch", "tokens_per_step",
    "dropout_layers",
)  # fmt: skip
COMPARE_KEYS = (
    "name", "status", "run_dir", "world_size", "per_device_batch_size", "grad_accum_steps", "global_batch_size",
    "lr", "steps", "samples_seen", "final_loss", "loss_at_baseline_samples", "wall_time_s", "samples_per_s",
    "speedup", "scaling_efficiency", "equivalent_to", "max_param_diff", "verdict", "noise_scale",
    "predicted_step_speedup", "data_efficiency", "predicted_samples_per_s", "prediction_error",
    "values_from", "plan_followed", "observed", "findings",
)  # fmt: skip
FINDING_CODES = {
    "plan_mismatch", "same_samples_across_ranks", "sampler_epoch_not_set", "batchnorm_not_synchronized",
    "uneven_steps_across_ranks", "observer_error", "noise_scale_not_measured",
    "lr_schedule_mismatch", "uneven_accumulation", "samples_below_plan",
    "ranks_not_synchronized", "no_process_group", "data_parallel_unchecked", "script_spawned_processes",
    "resumed_from_other_run", "loss_scaled_by_world_size", "record_not_written",
    "input_bound", "communication_bound", "straggler_rank", "accumulation_syncs_every_micro_batch",
    "cpu_oversubscribed", "find_unused_parameters_unneeded", "loss_constant",
    "loss_not_finite", "copies_of_one_training", "same_file_written_by_ranks",
}  # fmt: skip

PORT_JSON_KEYS = ("script", "output", "changes", "not_ported", "modules")  # `ddpcli port --json`
PORT_MODULE_KEYS = ("module", "output", "changes", "not_ported")  # each of its "modules"
PORT_CHANGE_KEYS = ("line", "kind", "text")
PORT_NOT_PORTED_KEYS = ("line", "reason")
