-- Scalar macros every query may use; engine/dataset/views.py runs this file on every connection.
-- (Files whose names start with '_' are not queries: `memsim query --list` leaves them out.)

-- How the queries name a training method, e.g. "amp_bf16 adamw pytorch lora-r16 nf4": part of every grain, so a
-- sweep over training methods never mixes them.
CREATE OR REPLACE MACRO training_method(precision, optimizer, framework, lora_rank, base_quant, offload) AS
    concat_ws(' ', precision, optimizer, framework,
              CASE WHEN lora_rank > 0 THEN 'lora-r' || lora_rank END,
              CASE WHEN base_quant <> 'none' THEN base_quant END,
              CASE WHEN offload <> 'none' THEN 'offload-' || offload END);
