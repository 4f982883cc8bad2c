-- Memory components at the peak, in GiB, of the fewest-GPU layout per model and GPU (or the roomiest at $n_gpus).
-- params:  $model   VARCHAR  model key, or NULL for every model
--          $gpu     VARCHAR  GPU key, or NULL for every GPU type
--          $n_gpus  BIGINT   GPU count to pick the layout at, or NULL for the fewest that fit
-- returns: one row per (model, method, gpu): n_gpus, layout, dp, tp, pp, cp, ep, sp, zero_stage, checkpointing,
--          micro_batch, seq_len,
--          peak_phase, weight_gib, grad_gib, optimizer_gib, activation_gib, temp_gib, slack_gib, overhead_gib
--          (these sum to device_peak_gib), capacity_gib. grad_gib and optimizer_gib count what is live at the
--          peak (no gradients in a forward peak without accumulation; paged optimizer states evicted).
SELECT
    model, method, gpu,
    c.n_gpus, layout(c.dp, c.tp, c.pp, c.cp, c.ep, c.sp, c.zero_stage) AS layout,
    c.dp, c.tp, c.pp, c.cp, c.ep, c.sp, c.zero_stage, c.checkpointing, c.micro_batch, c.seq_len, c.peak_phase,
    c.weight_bytes / 2^30                                                   AS weight_gib,
    c.peak_grad_bytes / 2^30                                                AS grad_gib,
    c.peak_optimizer_bytes / 2^30                                           AS optimizer_gib,
    c.activation_bytes / 2^30                                               AS activation_gib,
    c.temp_bytes / 2^30                                                     AS temp_gib,
    c.allocator_slack_bytes / 2^30                                          AS slack_gib,
    c.overhead_bytes / 2^30                                                 AS overhead_gib,
    c.device_peak_bytes / 2^30                                              AS device_peak_gib,
    c.capacity_bytes / 2^30                                                 AS capacity_gib
FROM fewest_gpu_layouts($model, $gpu, $n_gpus, NULL)
ORDER BY model, method, gpu;
