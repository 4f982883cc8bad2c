-- Cost against time to train $tokens tokens, per model: for each GPU type and GPU count the fastest layout that fits, and the fleets no other fleet beats on both.
-- params:  $method   VARCHAR  training method (as queries name it), or NULL for any
--          $tokens   DOUBLE   tokens to train (default 1e12)
-- returns: one row per (model, method, gpu, n_gpus) with a priced GPU and a fitting layout of known speed: model_label
--          (key and size), n_params, tokens (= $tokens), days and usd (to train them), usd_per_mtok, tokens_per_gpu_s, layout,
--          on_frontier (no other GPU type or count is both as fast and as cheap, one of them strictly), price_source
--          and price_date (the catalog's price and when it was read). Same grain and frontier as time_to_train.sql.
WITH fastest AS (
    SELECT
        model, precision, optimizer, framework, lora_rank, base_quant, offload, gpu, n_gpus,
        max(tokens_per_gpu_s)                                               AS tokens_per_gpu_s,
        arg_max(cost_per_mtok, (tokens_per_gpu_s, -index))                  AS usd_per_mtok,
        arg_max(concat_ws(' ', 'tp ' || tp, 'pp ' || pp, 'cp ' || cp, 'ZeRO-' || zero_stage,
                          'micro-batch ' || micro_batch, checkpointing), (tokens_per_gpu_s, -index)) AS layout
    FROM sweep
    WHERE valid AND fits AND tokens_per_gpu_s IS NOT NULL AND cost_per_mtok IS NOT NULL
      AND ($method IS NULL OR $method = training_method(precision, optimizer, framework, lora_rank, base_quant, offload))
    GROUP BY ALL
),
timed AS (
    SELECT
        *,
        $tokens / (tokens_per_gpu_s * n_gpus) / 86400                       AS days,
        usd_per_mtok * $tokens / 1e6                                        AS usd,
        min(usd_per_mtok * $tokens / 1e6) OVER (
            PARTITION BY model, precision, optimizer, framework, lora_rank, base_quant, offload
            ORDER BY $tokens / (tokens_per_gpu_s * n_gpus), usd_per_mtok
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)               AS cheapest_faster
    FROM fastest
)
SELECT
    t.model,
    training_method(t.precision, t.optimizer, t.framework, t.lora_rank, t.base_quant, t.offload)  AS method,
    CASE WHEN m.n_params IS NULL THEN t.model
         ELSE t.model || ' (' || round(m.n_params / 1e9, 1) || 'B)' END    AS model_label,
    m.n_params,
    $tokens                                                                 AS tokens,
    t.gpu,
    t.n_gpus,
    t.days,
    t.usd,
    t.usd_per_mtok,
    t.tokens_per_gpu_s,
    t.layout,
    t.cheapest_faster IS NULL OR t.usd < t.cheapest_faster                  AS on_frontier,
    g.price_source,
    g.price_date
FROM timed AS t
LEFT JOIN models AS m USING (model)
LEFT JOIN gpus AS g USING (gpu)
ORDER BY m.n_params NULLS LAST, t.model, method, t.days, t.gpu, t.n_gpus;
