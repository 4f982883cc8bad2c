-- How long and how much it takes to train $tokens tokens of each model, per GPU type and GPU count: the fastest layout that fits at each count, and whether that fleet is on the model's cost/time frontier.
-- params:  $model    VARCHAR  model key, or NULL for every model
--          $gpu      VARCHAR  GPU type, or NULL for every GPU type
--          $tokens   DOUBLE   tokens to train (>= 1) (default 1e12)
-- returns: one row per (model, method, gpu, n_gpus) with a fitting layout of known speed: nodes, the fastest layout
--          (tp, pp, cp, zero_stage, micro_batch, grad_accum, checkpointing), tokens_per_gpu_s, days (to train $tokens),
--          usd_per_mtok and usd (to train $tokens; NULL without a catalog price), on_frontier (no other GPU type or
--          count of this model and method is both as fast and as cheap, one of them strictly), price_source, price_date.
--          At one GPU type and count the fastest layout is also the cheapest: the fleet's $/h is fixed.
WITH fastest AS (
    SELECT
        model, precision, optimizer, framework, lora_rank, base_quant, offload, gpu, n_gpus,
        arg_max({'tp': tp, 'pp': pp, 'cp': cp, 'zero_stage': zero_stage, 'micro_batch': micro_batch,
                 'grad_accum': grad_accum, 'checkpointing': checkpointing, 'tokens_per_gpu_s': tokens_per_gpu_s,
                 'cost_per_mtok': cost_per_mtok},
                (tokens_per_gpu_s, -index))                                 AS best
    FROM sweep
    WHERE valid AND fits AND tokens_per_gpu_s > 0
      AND ($model IS NULL OR model = $model)
      AND ($gpu IS NULL OR gpu = $gpu)
    GROUP BY ALL
),
timed AS (
    SELECT
        *,
        $tokens / (best.tokens_per_gpu_s * n_gpus) / 86400                  AS days,
        best.cost_per_mtok * $tokens / 1e6                                  AS usd
    FROM fastest
),
frontier AS (
    SELECT
        *,
        -- the cheapest fleet among those strictly faster, or as fast and listed first
        min(usd) OVER (PARTITION BY model, precision, optimizer, framework, lora_rank, base_quant, offload
                       ORDER BY days, usd ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS cheapest_faster
    FROM timed
)
SELECT
    f.model,
    training_method(f.precision, f.optimizer, f.framework, f.lora_rank, f.base_quant, f.offload)  AS method,
    f.gpu,
    f.n_gpus,
    ceil(f.n_gpus / g.gpus_per_node)::BIGINT                                AS nodes,
    f.best.tp, f.best.pp, f.best.cp, f.best.zero_stage, f.best.micro_batch, f.best.grad_accum, f.best.checkpointing,
    f.best.tokens_per_gpu_s,
    f.days,
    f.best.cost_per_mtok                                                    AS usd_per_mtok,
    f.usd,
    f.usd IS NOT NULL AND (f.cheapest_faster IS NULL OR f.usd < f.cheapest_faster) AS on_frontier,
    g.price_source,
    g.price_date
FROM frontier AS f
LEFT JOIN gpus AS g USING (gpu)
ORDER BY f.model, method, f.days, f.gpu, f.n_gpus;
