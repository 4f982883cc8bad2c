-- Scalar macros every query may use; engine/dataset/views.py runs this file on every connection.
-- (Files whose names start with '_' are not queries: `memsim query --list` leaves them out.)

-- How the queries name a training method, e.g. "amp_bf16 adamw pytorch lora-r16 nf4": part of every grain, so a
-- sweep over training methods never mixes them.
CREATE OR REPLACE MACRO training_method(precision, optimizer, framework, lora_rank, base_quant, offload) AS
    concat_ws(' ', precision, optimizer, framework,
              CASE WHEN lora_rank > 0 THEN 'lora-r' || lora_rank END,
              CASE WHEN base_quant <> 'none' THEN base_quant END,
              CASE WHEN offload <> 'none' THEN 'offload-' || offload END);

-- Memory to spare at the peak: what the job may use (usable_bytes = capacity * (1 - headroom)) less the device
-- peak; explain's "to spare" and the report's spare. Negative: by how much it misses.
CREATE OR REPLACE MACRO spare_bytes(usable_bytes, device_peak_bytes) AS usable_bytes - device_peak_bytes;

-- A parallel layout as one label, every degree that is not 1 shown: "dp 8 tp 2 cp 2 sp ZeRO-3"; "dp 1" alone on
-- one GPU. The queries also return each degree as its own column.
CREATE OR REPLACE MACRO layout(dp, tp, pp, cp, ep, sp, zero_stage) AS
    concat_ws(' ', 'dp ' || dp,
              CASE WHEN tp > 1 THEN 'tp ' || tp END, CASE WHEN pp > 1 THEN 'pp ' || pp END,
              CASE WHEN cp > 1 THEN 'cp ' || cp END, CASE WHEN ep > 1 THEN 'ep ' || ep END,
              CASE WHEN sp THEN 'sp' END, CASE WHEN zero_stage > 0 THEN 'ZeRO-' || zero_stage END);
