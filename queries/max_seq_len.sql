-- Longest sequence that fits, per model, GPU, parallel layout, recompute and micro-batch.
-- params:  $model        VARCHAR  model key, or NULL for every model
--          $gpu          VARCHAR  GPU key, or NULL for every GPU type
--          $micro_batch  BIGINT   samples per GPU, or NULL for every swept micro-batch
-- returns: one row per (model, method, gpu, n_gpus, tp, pp, cp, ep, sp, zero_stage, checkpointing, micro_batch):
--          max_seq_len, device_peak_gib and headroom_gib at that length (axes not listed: their best value)
WITH fitting AS (
    SELECT *
    FROM sweep
    WHERE valid AND fits
      AND ($model IS NULL OR model = $model)
      AND ($gpu IS NULL OR gpu = $gpu)
      AND ($micro_batch IS NULL OR micro_batch = $micro_batch)
),
longest AS (
    SELECT
        model, precision, optimizer, framework, lora_rank, base_quant, offload,
        gpu, n_gpus, tp, pp, cp, ep, sp, zero_stage, checkpointing, micro_batch,
        max(seq_len)                                                           AS max_seq_len,
        arg_max(device_peak_bytes, (seq_len, -device_peak_bytes))             AS device_peak_bytes,
        arg_max(capacity_bytes - device_peak_bytes, (seq_len, -device_peak_bytes)) AS headroom_bytes
    FROM fitting
    GROUP BY ALL
)
SELECT
    model,
    training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
    gpu, n_gpus, tp, pp, cp, ep, sp, zero_stage, checkpointing, micro_batch,
    max_seq_len,
    device_peak_bytes / 2^30                                                AS device_peak_gib,
    headroom_bytes / 2^30                                                   AS headroom_gib
FROM longest
ORDER BY ALL;
