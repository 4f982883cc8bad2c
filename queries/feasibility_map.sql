-- Whether any layout fits, per GPU type, model and GPU count, with the most memory to spare: the cells of a heat map.
-- params:  $seq_len  BIGINT   tokens per sample, or NULL for any swept length
-- returns: one row per (gpu, model, method, n_gpus) with a valid layout: any_fits, fitting (count),
--          best_spare_gib (the most memory to spare at the peak, usable - device peak, among fitting layouts; NULL when none fits),
--          least_miss_gib (how far the closest layout is over the usable bytes, capacity * (1 - headroom); NULL when one fits)
SELECT
    gpu,
    model,
    method,
    n_gpus,
    any_fits,
    fitting,
    best_spare_bytes / 2^30                                              AS best_spare_gib,
    CASE WHEN NOT any_fits THEN least_miss_bytes / 2^30 END                 AS least_miss_gib
FROM feasibility_cells($seq_len, NULL)
ORDER BY gpu, model, method, n_gpus;
