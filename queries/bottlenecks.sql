-- Which component dominates where configurations fail (valid but not fitting), and by how much they miss.
-- params:  $model  VARCHAR  model key, or NULL for every model
--          $gpu    VARCHAR  GPU key, or NULL for every GPU type
-- returns: one row per (model, bottleneck) among failing configurations: failing, share (of the model's
--          failing configurations), median_miss_gib and max_miss_gib, where miss = device peak - usable bytes (capacity * (1 - headroom))
WITH failing AS (
    SELECT
        model,
        bottleneck,
        -spare_bytes(usable_bytes, device_peak_bytes)                       AS miss_bytes
    FROM sweep
    WHERE valid AND NOT fits
      AND ($model IS NULL OR model = $model)
      AND ($gpu IS NULL OR gpu = $gpu)
),
per_component AS (
    SELECT
        model,
        bottleneck,
        count(*)                                                            AS failing,
        median(miss_bytes) / 2^30                                           AS median_miss_gib,
        max(miss_bytes) / 2^30                                              AS max_miss_gib
    FROM failing
    GROUP BY ALL
)
SELECT
    model,
    bottleneck,
    failing,
    failing / sum(failing) OVER (PARTITION BY model)                        AS share,
    median_miss_gib,
    max_miss_gib
FROM per_component
ORDER BY model, failing DESC, bottleneck;
