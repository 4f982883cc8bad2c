-- What ZeRO, TP and recompute buy: one model's lowest device peak on one GPU type per ZeRO stage, TP and recompute.
-- params:  $model        VARCHAR  model key
--          $gpu          VARCHAR  GPU key
--          $n_gpus       BIGINT   GPU count, or NULL for any
--          $micro_batch  BIGINT   samples per GPU, or NULL for any
--          $seq_len      BIGINT   tokens per sample, or NULL for any
-- returns: one row per (method, zero_stage, tp, checkpointing) over valid layouts, the other axes (n_gpus, pp,
--          micro_batch, seq_len, unless pinned) at their lowest peak: min_device_peak_gib, usable_gib (capacity less
--          headroom), any_fits, fitting (count)
WITH layouts AS (
    SELECT *
    FROM sweep
    WHERE valid
      AND model = $model
      AND gpu = $gpu
      AND ($n_gpus IS NULL OR n_gpus = $n_gpus)
      AND ($micro_batch IS NULL OR micro_batch = $micro_batch)
      AND ($seq_len IS NULL OR seq_len = $seq_len)
),
lowest AS (
    SELECT
        model, precision, optimizer, framework, lora_rank, base_quant, offload, gpu,
        zero_stage, tp, checkpointing,
        min(device_peak_bytes)                                              AS device_peak_bytes,
        arg_min(usable_bytes, device_peak_bytes)                            AS usable_bytes,
        bool_or(fits)                                                       AS any_fits,
        count(*) FILTER (WHERE fits)                                        AS fitting
    FROM layouts
    GROUP BY ALL
)
SELECT
    model,
    training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
    gpu, zero_stage, tp, checkpointing,
    device_peak_bytes / 2^30                                                AS min_device_peak_gib,
    usable_bytes / 2^30                                                     AS usable_gib,
    any_fits,
    fitting
FROM lowest
ORDER BY method, zero_stage, tp, checkpointing;
