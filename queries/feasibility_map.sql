-- Whether any layout fits, per GPU type, model and GPU count, with the best headroom: the cells of a heat map.
-- params:  $seq_len  BIGINT   tokens per sample, or NULL for any swept length
-- returns: one row per (gpu, model, method, n_gpus) with a valid layout: any_fits, fitting (count),
--          best_headroom_gib (most memory free at the peak among fitting layouts; NULL when none fits),
--          least_miss_gib (how far the closest layout is over capacity * (1 - headroom); NULL when one fits)
WITH layouts AS (
    SELECT *
    FROM sweep
    WHERE valid
      AND ($seq_len IS NULL OR seq_len = $seq_len)
),
cells AS (
    SELECT
        gpu, model, precision, optimizer, framework, lora_rank, base_quant, offload, n_gpus,
        bool_or(fits)                                                       AS any_fits,
        count(*) FILTER (WHERE fits)                                        AS fitting,
        max(capacity_bytes - device_peak_bytes) FILTER (WHERE fits)         AS best_headroom_bytes,
        min(device_peak_bytes - capacity_bytes * (1 - headroom))            AS least_miss_bytes
    FROM layouts
    GROUP BY ALL
)
SELECT
    gpu,
    model,
    training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
    n_gpus,
    any_fits,
    fitting,
    best_headroom_bytes / 2^30                                              AS best_headroom_gib,
    CASE WHEN NOT any_fits THEN least_miss_bytes / 2^30 END                 AS least_miss_gib
FROM cells
ORDER BY gpu, model, method, n_gpus;
