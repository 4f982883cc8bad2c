-- For each model and training method, the GPU types that train it ranked three ways: by $ per million tokens, by the time to train $tokens tokens, and by the $/h of the smallest fleet that fits.
-- params:  $model    VARCHAR  model key, or NULL for every model
--          $seq_len  BIGINT   tokens per sample, or NULL for any swept length
--          $tokens   DOUBLE   tokens to train, for the days and dollars columns (>= 1) (default 1e12)
--          $rank_by  VARCHAR  row order within a model and method: usd_per_hour, cost ($/Mtok) or time (default usd_per_hour)
-- returns: one row per (model, method, gpu) with a fitting configuration:
--          price_rank, min_gpus, nodes (of gpus_per_node GPUs, the instance the price rents), usd_per_gpu_hour,
--          fleet_usd_per_hour (the smallest fleet that fits, by its $/h: min_gpus x $/GPU-hour),
--          nodes_usd_per_hour (what renting its whole nodes costs: nodes x gpus_per_node x $/GPU-hour);
--          cost_rank, usd_per_mtok and the layout with the fewest $ per million tokens (cost_layout, cost_n_gpus),
--          the days and $ it takes to train $tokens (cost_days, cost_usd);
--          time_rank and the fastest layout for $tokens (fast_layout, fast_n_gpus, fast_days, fast_usd);
--          price_source, price_date (the catalog's price and when it was read).
--          GPUs without a catalog price come last by $, with NULL cost columns and ranks; time ranks them all.
--          Cost and time come from layouts whose pipeline is filled (pp = 1 or grad_accum >= pp); a pipeline with
--          fewer micro-batches than stages is mostly bubble (arXiv:2104.04473 sec. 2.2). "Cheapest" by cost_rank is
--          the fewest dollars to train $tokens; price_rank is the smallest fleet's $/h, which is not the same.
--          Time and cost are memsim's step-time model (engine/model/time.py; `memsim validate --set throughput`).
WITH checked AS (
    SELECT CASE WHEN $rank_by IN ('usd_per_hour', 'cost', 'time') THEN $rank_by
                ELSE error('$rank_by must be usd_per_hour, cost or time, got ' || $rank_by) END AS rank_by
),
fitting AS (
    SELECT
        *,
        $tokens / (tokens_per_gpu_s * n_gpus) / 86400                       AS days,
        pp = 1 OR grad_accum >= pp                                          AS filled,
        concat_ws(' ', n_gpus || ' GPUs', 'tp ' || tp, 'pp ' || pp, 'cp ' || cp, 'ZeRO-' || zero_stage,
                  'micro-batch ' || micro_batch, 'grad_accum ' || grad_accum, checkpointing) AS layout
    FROM fitting_rows($model, NULL, $seq_len)
),
fleets AS (
    SELECT
        model, precision, optimizer, framework, lora_rank, base_quant, offload, gpu,
        min(n_gpus)                                                         AS min_gpus,
        -- the fewest $ per million tokens (ties: fewer GPUs, then sweep order), and the fastest fleet, each of the
        -- layouts whose pipeline is filled (at least as many micro-batches as stages)
        min(cost_per_mtok) FILTER (WHERE filled)                            AS usd_per_mtok,
        arg_min(layout, (cost_per_mtok, n_gpus, index)) FILTER (WHERE cost_per_mtok IS NOT NULL AND filled) AS cost_layout,
        arg_min(n_gpus, (cost_per_mtok, n_gpus, index)) FILTER (WHERE cost_per_mtok IS NOT NULL AND filled) AS cost_n_gpus,
        arg_min(days, (cost_per_mtok, n_gpus, index)) FILTER (WHERE cost_per_mtok IS NOT NULL AND filled)   AS cost_days,
        min(days) FILTER (WHERE filled)                                     AS fast_days,
        arg_min(layout, (days, n_gpus, index)) FILTER (WHERE days IS NOT NULL AND filled) AS fast_layout,
        arg_min(n_gpus, (days, n_gpus, index)) FILTER (WHERE days IS NOT NULL AND filled) AS fast_n_gpus,
        arg_min(cost_per_mtok, (days, n_gpus, index)) FILTER (WHERE days IS NOT NULL AND filled) AS fast_usd_per_mtok
    FROM fitting
    GROUP BY ALL
),
priced AS (
    SELECT
        f.*,
        ceil(f.min_gpus / g.gpus_per_node)::BIGINT                          AS nodes,
        g.usd_per_hour                                                      AS usd_per_gpu_hour,
        f.min_gpus * g.usd_per_hour                                         AS fleet_usd_per_hour,
        g.gpus_per_node,
        ceil(f.min_gpus / g.gpus_per_node) * g.gpus_per_node * g.usd_per_hour AS nodes_usd_per_hour,
        g.price_source,
        g.price_date
    FROM fleets AS f
    LEFT JOIN gpus AS g USING (gpu)
),
ranked AS (
    SELECT
        *,
        -- windows over the few aggregated rows, not over the sweep
        CASE WHEN fleet_usd_per_hour IS NOT NULL THEN
            rank() OVER (PARTITION BY model, precision, optimizer, framework, lora_rank, base_quant, offload
                         ORDER BY fleet_usd_per_hour NULLS LAST)
        END                                                                 AS price_rank,
        CASE WHEN usd_per_mtok IS NOT NULL THEN
            rank() OVER (PARTITION BY model, precision, optimizer, framework, lora_rank, base_quant, offload
                         ORDER BY usd_per_mtok NULLS LAST)
        END                                                                 AS cost_rank,
        CASE WHEN fast_days IS NOT NULL THEN
            rank() OVER (PARTITION BY model, precision, optimizer, framework, lora_rank, base_quant, offload
                         ORDER BY fast_days NULLS LAST)
        END                                                                 AS time_rank
    FROM priced
)
SELECT
    model,
    training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
    gpu,
    price_rank,
    min_gpus,
    nodes,
    gpus_per_node,
    usd_per_gpu_hour,
    fleet_usd_per_hour,
    nodes_usd_per_hour,
    cost_rank,
    usd_per_mtok,
    cost_layout,
    cost_n_gpus,
    cost_days,
    usd_per_mtok * $tokens / 1e6                                            AS cost_usd,
    time_rank,
    fast_layout,
    fast_n_gpus,
    fast_days,
    fast_usd_per_mtok * $tokens / 1e6                                       AS fast_usd,
    price_source,
    price_date
FROM ranked, checked
ORDER BY model, method,
         CASE checked.rank_by WHEN 'cost' THEN usd_per_mtok WHEN 'time' THEN fast_days ELSE fleet_usd_per_hour END
         NULLS LAST,
         min_gpus, gpu;
