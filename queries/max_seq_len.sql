-- Longest sequence that fits, per model, GPU, parallel layout, recompute and micro-batch.
-- params:  $model        VARCHAR  model key, or NULL for every model
--          $gpu          VARCHAR  GPU key, or NULL for every GPU type
--          $micro_batch  BIGINT   samples per GPU, or NULL for every swept micro-batch
-- returns: one row per (model, method, gpu, n_gpus, tp, pp, cp, ep, sp, zero_stage, checkpointing, micro_batch):
--          max_seq_len, device_peak_gib and spare_gib at that length (axes not listed: their best value)
SELECT
    model, method, gpu, n_gpus, tp, pp, cp, ep, sp, zero_stage, checkpointing,
    held                                                                    AS micro_batch,
    largest                                                                 AS max_seq_len,
    device_peak_bytes / 2^30                                                AS device_peak_gib,
    spare_bytes / 2^30                                                   AS spare_gib
FROM largest_that_fits('seq_len', $model, $gpu, $micro_batch)
ORDER BY ALL;
