-- Memory at the peak, component by component, of each model's fewest-GPU layout on one GPU type, with the capacity it must fit under.
-- params:  $method  VARCHAR  training method (as queries name it), or NULL for any
--          $gpu     VARCHAR  GPU key
-- returns: one row per model that fits on $gpu: gpu, n_params, layout (n_gpus, tp, pp, zero_stage, checkpointing,
--          micro_batch, seq_len, peak_phase, layout_label), weight_gib, grad_gib, optimizer_gib, activation_gib, temp_gib,
--          slack_gib, overhead_gib (these sum to device_peak_gib), capacity_gib, usable_gib (capacity * (1 - headroom))
SELECT
    l.model,
    l.method,
    l.gpu,
    m.n_params,
    l.c.n_gpus, l.c.tp, l.c.pp, l.c.zero_stage, l.c.checkpointing, l.c.micro_batch, l.c.seq_len, l.c.peak_phase,
    l.model || ': ' || l.c.n_gpus || CASE WHEN l.c.n_gpus = 1 THEN ' GPU' ELSE ' GPUs' END || ', tp ' || l.c.tp || ', pp ' || l.c.pp || ', ZeRO-' || l.c.zero_stage
        || ', ' || l.c.checkpointing || ' recompute'                        AS layout_label,
    l.c.weight_bytes / 2^30                                                 AS weight_gib,
    l.c.peak_grad_bytes / 2^30                                              AS grad_gib,
    l.c.peak_optimizer_bytes / 2^30                                         AS optimizer_gib,
    l.c.activation_bytes / 2^30                                             AS activation_gib,
    l.c.temp_bytes / 2^30                                                   AS temp_gib,
    l.c.allocator_slack_bytes / 2^30                                        AS slack_gib,
    l.c.overhead_bytes / 2^30                                               AS overhead_gib,
    l.c.device_peak_bytes / 2^30                                            AS device_peak_gib,
    l.c.capacity_bytes / 2^30                                               AS capacity_gib,
    l.c.usable_bytes / 2^30                                                 AS usable_gib
FROM fewest_gpu_layouts(NULL, $gpu, NULL, $method) AS l
LEFT JOIN models AS m USING (model)
ORDER BY m.n_params NULLS LAST, l.model, l.method;
