-- Heat-map cells for one training method: per GPU type, model (with its size) and GPU count, whether any layout fits and the most memory to spare.
-- params:  $method   VARCHAR  training method (as queries name it), or NULL for any
--          $seq_len  BIGINT   tokens per sample, or NULL for any swept length
-- returns: one row per (gpu, model, n_gpus) with a valid layout: model_label (key and size), n_params, capacity_gib,
--          any_fits, fitting (count), best_spare_gib (the most memory to spare at the peak beyond the headroom kept
--          free, usable - device peak; NULL when none fits), least_miss_gib (how far the closest layout is over the
--          usable bytes, capacity * (1 - headroom); NULL when one fits)
WITH cells AS (  -- feasibility_cells (_views.sql) per method, then over the methods the filter leaves
    SELECT
        gpu, model, n_gpus,
        min(capacity_bytes)                                                 AS capacity_bytes,
        bool_or(any_fits)                                                   AS any_fits,
        sum(fitting)::BIGINT                                                AS fitting,
        max(best_spare_bytes)                                               AS best_spare_bytes,
        min(least_miss_bytes)                                               AS least_miss_bytes
    FROM feasibility_cells($seq_len, $method)
    GROUP BY ALL
)
SELECT
    c.gpu,
    c.model,
    CASE WHEN m.n_params IS NULL THEN c.model
         ELSE c.model || ' (' || round(m.n_params / 1e9, 1) || 'B)' END    AS model_label,
    m.n_params,
    c.n_gpus,
    c.capacity_bytes / 2^30                                                 AS capacity_gib,
    c.any_fits,
    c.fitting,
    c.best_spare_bytes / 2^30                                               AS best_spare_gib,
    CASE WHEN NOT c.any_fits THEN c.least_miss_bytes / 2^30 END             AS least_miss_gib
FROM cells AS c
LEFT JOIN models AS m USING (model)
ORDER BY c.gpu, m.n_params NULLS LAST, c.model, c.n_gpus;
