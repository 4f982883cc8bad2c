-- Largest micro-batch that fits, per model, GPU, parallel layout, recompute and sequence length.
-- params:  $model    VARCHAR  model key, or NULL for every model
--          $gpu      VARCHAR  GPU key, or NULL for every GPU type
--          $seq_len  BIGINT   tokens per sample, or NULL for every swept length
-- returns: one row per (model, method, gpu, n_gpus, tp, pp, cp, ep, sp, zero_stage, checkpointing, seq_len):
--          max_micro_batch, device_peak_gib and headroom_gib at that micro-batch (axes not listed: their best value)
WITH fitting AS (
    SELECT *
    FROM sweep
    WHERE valid AND fits
      AND ($model IS NULL OR model = $model)
      AND ($gpu IS NULL OR gpu = $gpu)
      AND ($seq_len IS NULL OR seq_len = $seq_len)
),
largest AS (
    SELECT
        model, precision, optimizer, framework, lora_rank, base_quant, offload,
        gpu, n_gpus, tp, pp, cp, ep, sp, zero_stage, checkpointing, seq_len,
        max(micro_batch)                                                          AS max_micro_batch,
        arg_max(device_peak_bytes, (micro_batch, -device_peak_bytes))            AS device_peak_bytes,
        arg_max(capacity_bytes - device_peak_bytes, (micro_batch, -device_peak_bytes)) AS headroom_bytes
    FROM fitting
    GROUP BY ALL
)
SELECT
    model,
    training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
    gpu, n_gpus, tp, pp, cp, ep, sp, zero_stage, checkpointing, seq_len,
    max_micro_batch,
    device_peak_bytes / 2^30                                                AS device_peak_gib,
    headroom_bytes / 2^30                                                   AS headroom_gib
FROM largest
ORDER BY ALL;
