-- Cost against time to train $tokens tokens, per model: for each GPU type and GPU count the fastest layout that fits with its pipeline filled, the fleets no other fleet beats on both, and why a fleet that fits has no point.
-- params:  $method   VARCHAR  training method (as queries name it), or NULL for any
--          $tokens   DOUBLE   tokens to train (>= 1) (default 1e12)
-- returns: one row per (model, method, gpu, n_gpus) with a fitting layout: model_label (key and size), n_params,
--          tokens (= $tokens), drawn (a point of the chart: a filled layout of known speed on a priced GPU), days and
--          usd (to train $tokens), usd_per_mtok, tokens_per_gpu_s, layout, on_frontier (no other drawn fleet is both
--          as fast and as cheap, one of them strictly), why_not_drawn (NULL when drawn: no catalog FLOP rate, no
--          network bandwidth beyond one node, only pipelines with fewer micro-batches than stages, no catalog
--          price), gpus_per_node, price_source and price_date (the catalog's price and when it was read).
--          A pipeline is filled when it runs at least as many micro-batches per step as it has stages (grad_accum >=
--          pp: every stage works in 1F1B's steady state, arXiv:2104.04473 sec. 2.2); one with fewer is mostly bubble.
WITH fitting AS (
    SELECT
        *,
        tokens_per_gpu_s IS NOT NULL                                        AS timed,
        tokens_per_gpu_s IS NOT NULL AND (pp = 1 OR grad_accum >= pp)       AS filled
    FROM sweep
    WHERE valid AND fits
      AND ($method IS NULL OR $method = training_method(precision, optimizer, framework, lora_rank, base_quant, offload))
),
fleets AS (
    SELECT
        model, precision, optimizer, framework, lora_rank, base_quant, offload, gpu, n_gpus,
        bool_or(timed)                                                      AS timed,
        bool_or(filled)                                                     AS filled,
        max(tokens_per_gpu_s) FILTER (WHERE filled)                         AS tokens_per_gpu_s,
        arg_max(cost_per_mtok, (tokens_per_gpu_s, -index)) FILTER (WHERE filled) AS usd_per_mtok,
        arg_max(concat_ws(' ', 'tp ' || tp, 'pp ' || pp, 'cp ' || cp, 'ZeRO-' || zero_stage,
                          'micro-batch ' || micro_batch, 'grad_accum ' || grad_accum, checkpointing),
                (tokens_per_gpu_s, -index)) FILTER (WHERE filled)           AS layout
    FROM fitting
    GROUP BY ALL
),
reasoned AS (
    SELECT
        f.*,
        g.gpus_per_node,
        g.price_source,
        g.price_date,
        CASE
            WHEN NOT f.timed AND g.bf16_tflops IS NULL THEN 'no FLOP rate in the catalog'
            WHEN NOT f.timed AND f.n_gpus > coalesce(g.gpus_per_node, 1) AND g.inter_node_bytes_per_s IS NULL
                THEN 'no network bandwidth between its nodes in the catalog'
            WHEN NOT f.timed THEN 'a link or rate its layouts need is not in the catalog'
            WHEN NOT f.filled THEN 'only pipelines with fewer micro-batches than stages fit (sweep grad_accum >= pp)'
            WHEN f.usd_per_mtok IS NULL THEN 'no catalog price'
        END                                                                 AS why_not_drawn
    FROM fleets AS f
    LEFT JOIN gpus AS g USING (gpu)
),
timed AS (
    SELECT
        *,
        why_not_drawn IS NULL                                               AS drawn,
        $tokens / (tokens_per_gpu_s * n_gpus) / 86400                       AS days,
        usd_per_mtok * $tokens / 1e6                                        AS usd,
        min(CASE WHEN why_not_drawn IS NULL THEN usd_per_mtok * $tokens / 1e6 END) OVER (
            PARTITION BY model, precision, optimizer, framework, lora_rank, base_quant, offload
            ORDER BY why_not_drawn IS NOT NULL, $tokens / (tokens_per_gpu_s * n_gpus), usd_per_mtok
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)               AS cheapest_faster
    FROM reasoned
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
    t.drawn,
    CASE WHEN t.drawn THEN t.days END                                       AS days,
    CASE WHEN t.drawn THEN t.usd END                                        AS usd,
    t.usd_per_mtok,
    t.tokens_per_gpu_s,
    t.layout,
    t.drawn AND (t.cheapest_faster IS NULL OR t.usd < t.cheapest_faster)    AS on_frontier,
    t.why_not_drawn,
    t.gpus_per_node,
    t.price_source,
    t.price_date
FROM timed AS t
LEFT JOIN models AS m USING (model)
ORDER BY m.n_params NULLS LAST, t.model, method, t.drawn DESC, t.days, t.gpu, t.n_gpus;
