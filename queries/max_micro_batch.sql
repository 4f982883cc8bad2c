-- Largest micro-batch that fits, per model, GPU, parallel layout, recompute and sequence length.
-- params:  $model    VARCHAR  model key, or NULL for every model
--          $gpu      VARCHAR  GPU key, or NULL for every GPU type
--          $seq_len  BIGINT   tokens per sample, or NULL for every swept length
-- returns: one row per (model, method, gpu, n_gpus, tp, pp, cp, ep, sp, zero_stage, checkpointing, seq_len):
--          max_micro_batch, device_peak_gib and spare_gib at that micro-batch (axes not listed: their best value)
SELECT
    model, method, gpu, n_gpus, tp, pp, cp, ep, sp, zero_stage, checkpointing,
    held                                                                    AS seq_len,
    largest                                                                 AS max_micro_batch,
    device_peak_bytes / 2^30                                                AS device_peak_gib,
    spare_bytes / 2^30                                                   AS spare_gib
FROM largest_that_fits('micro_batch', $model, $gpu, $seq_len)
ORDER BY ALL;
