-- Memory components at the peak, in GiB, of the fewest-GPU layout per model and GPU (or the roomiest at $n_gpus).
-- params:  $model   VARCHAR  model key, or NULL for every model
--          $gpu     VARCHAR  GPU key, or NULL for every GPU type
--          $n_gpus  BIGINT   GPU count to pick the layout at, or NULL for the fewest that fit
-- returns: one row per (model, method, gpu): n_gpus, tp, pp, zero_stage, checkpointing, micro_batch, seq_len,
--          peak_phase, weight_gib, grad_gib, optimizer_gib, activation_gib, temp_gib, slack_gib, overhead_gib
--          (these sum to device_peak_gib), capacity_gib. grad_gib and optimizer_gib count what is live at the
--          peak (no gradients in a forward peak without accumulation; paged optimizer states evicted).
WITH fitting AS (
    SELECT *
    FROM sweep
    WHERE valid AND fits
      AND ($model IS NULL OR model = $model)
      AND ($gpu IS NULL OR gpu = $gpu)
      AND ($n_gpus IS NULL OR n_gpus = $n_gpus)
),
chosen AS (
    SELECT
        model, precision, optimizer, framework, lora_rank, base_quant, offload, gpu,
        arg_min({'n_gpus': n_gpus, 'tp': tp, 'pp': pp, 'zero_stage': zero_stage, 'checkpointing': checkpointing,
                 'micro_batch': micro_batch, 'seq_len': seq_len, 'peak_phase': peak_phase,
                 'weight_bytes': weight_bytes, 'peak_grad_bytes': peak_grad_bytes,
                 'peak_optimizer_bytes': peak_optimizer_bytes,
                 'activation_bytes': activation_bytes, 'temp_bytes': temp_bytes,
                 'allocated_peak_bytes': allocated_peak_bytes, 'reserved_peak_bytes': reserved_peak_bytes,
                 'overhead_bytes': overhead_bytes, 'device_peak_bytes': device_peak_bytes,
                 'capacity_bytes': capacity_bytes},
                (n_gpus, device_peak_bytes, index))                         AS c
    FROM fitting
    GROUP BY ALL
)
SELECT
    model,
    training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
    gpu,
    c.n_gpus, c.tp, c.pp, c.zero_stage, c.checkpointing, c.micro_batch, c.seq_len, c.peak_phase,
    c.weight_bytes / 2^30                                                   AS weight_gib,
    c.peak_grad_bytes / 2^30                                                AS grad_gib,
    c.peak_optimizer_bytes / 2^30                                           AS optimizer_gib,
    c.activation_bytes / 2^30                                               AS activation_gib,
    c.temp_bytes / 2^30                                                     AS temp_gib,
    (c.reserved_peak_bytes - c.allocated_peak_bytes) / 2^30                 AS slack_gib,
    c.overhead_bytes / 2^30                                                 AS overhead_gib,
    c.device_peak_bytes / 2^30                                              AS device_peak_gib,
    c.capacity_bytes / 2^30                                                 AS capacity_gib
FROM chosen
ORDER BY model, method, gpu;
