-- For each model, GPU types ranked by the $/h of their smallest feasible fleet (n_gpus * gpus.usd_per_hour).
-- params:  $model    VARCHAR  model key, or NULL for every model
--          $seq_len  BIGINT   tokens per sample, or NULL for any swept length
-- returns: one row per (model, method, gpu) with a fitting configuration: price_rank, min_gpus, nodes,
--          usd_per_gpu_hour, fleet_usd_per_hour. GPUs without a catalog price come last, with NULL cost and rank.
WITH fitting AS (
    SELECT *
    FROM sweep
    WHERE valid AND fits
      AND ($model IS NULL OR model = $model)
      AND ($seq_len IS NULL OR seq_len = $seq_len)
),
fleets AS (
    SELECT
        model, precision, optimizer, framework, lora_rank, base_quant, offload, gpu,
        min(n_gpus)                                                         AS min_gpus
    FROM fitting
    GROUP BY ALL
),
priced AS (
    SELECT
        f.*,
        ceil(f.min_gpus / g.gpus_per_node)::BIGINT                          AS nodes,
        g.usd_per_hour                                                      AS usd_per_gpu_hour,
        f.min_gpus * g.usd_per_hour                                         AS fleet_usd_per_hour
    FROM fleets AS f
    LEFT JOIN gpus AS g USING (gpu)
)
SELECT
    model,
    training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
    gpu,
    -- a window over the few aggregated rows, not over the sweep
    CASE WHEN fleet_usd_per_hour IS NOT NULL THEN
        rank() OVER (PARTITION BY model, precision, optimizer, framework, lora_rank, base_quant, offload
                     ORDER BY fleet_usd_per_hour NULLS LAST)
    END                                                                     AS price_rank,
    min_gpus,
    nodes,
    usd_per_gpu_hour,
    fleet_usd_per_hour
FROM priced
ORDER BY model, method, fleet_usd_per_hour NULLS LAST, min_gpus, gpu;
