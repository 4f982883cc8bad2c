"""softmax_saves_input: PyTorch before 1.11, whose softmax and log_softmax nodes kept their input for backward.

The byte counts are worked by hand from the mechanism (tools/autograd/derivatives.yaml before 1.11:
`_softmax_backward_data(grad, result, dim, self)`); the traced steps run the harness's emulation of that node
(engine/checks/measure/recipe_softmax.py) through transformers' real modules.
"""

import pytest

from engine.inputs.codes import Phase
from engine.model.activations import local_tokens, scores_bytes_per_key
from engine.model.loss import fp32_logits_bytes, loss_backward_bytes
from tests.support import config, outputs

GIB = 2**30
BERT_LARGE = dict(model="bert-large-uncased", seq_len=512, micro_batch=4, optimizer="adamw", optimizer_impl="forloop",
                  zero_grad="zeros", attention="eager", dropout=0.1, gpu="v100-sxm2-16gb")


@pytest.mark.parametrize("model, precision, kept", [
    ("bert-large-uncased", "fp32", 4),
    ("bert-large-uncased", "amp_fp16", 4),  # fp16 scores plus the fp32 extended attention mask: fp32
    ("bert-large-uncased", "fp16", 2),  # fp16 throughout, no dtype given
    ("llama-3.2-1b", "bf16", 4),  # bf16 scores given dtype=torch.float32: converted first, the copy kept
    ("llama-3.2-1b", "fp16", 2),  # fp16 scores given dtype=torch.float32: upcast inside the kernel (half_to_float)
])
def test_eager_attention_keeps_the_scores_as_the_softmax_kernel_took_them(model, precision, kept):
    # per head, token and key
    case = dict(BERT_LARGE, model=model, precision=precision)
    old, new = (config(**case, softmax_saves_input=s) for s in (True, False))
    heads = config(**case).n_heads
    assert scores_bytes_per_key(old) - scores_bytes_per_key(new) == heads * kept


def test_bert_large_batch_4_keeps_each_layers_fp32_scores_until_its_backward():
    # 24 layers x 16 heads x 512 x 512 keys x 4 samples x 4 bytes = 1.5 GiB more at the peak, which is backward's
    old, new = (outputs(config(**BERT_LARGE, precision="amp_fp16", softmax_saves_input=s)) for s in (True, False))
    assert old["allocated_peak_bytes"] - new["allocated_peak_bytes"] == 24 * 16 * 512 * 512 * 4 * 4


def test_an_evaluation_forward_keeps_nothing_for_a_backward():
    # torch.no_grad: no node, so nothing kept; the training step's peak still moves
    evaluating = dict(BERT_LARGE, precision="amp_fp16", micro_batch=1, eval_micro_batch=128)
    old, new = (outputs(config(**evaluating, softmax_saves_input=s)) for s in (True, False))
    assert old["peak_phase"] == new["peak_phase"] == Phase.EVAL.value
    assert old["allocated_peak_bytes"] == new["allocated_peak_bytes"]
    training = dict(evaluating, eval_micro_batch=0)
    old, new = (outputs(config(**training, softmax_saves_input=s)) for s in (True, False))
    assert old["allocated_peak_bytes"] - new["allocated_peak_bytes"] == 24 * 16 * 512 * 512 * 4


def test_the_standard_loss_keeps_its_fp32_logits_through_log_softmax_backward():
    lm = dict(model="llama-3.2-1b", seq_len=2048, micro_batch=2, precision="bf16")
    old, new = (config(**lm, softmax_saves_input=s) for s in (True, False))
    t = local_tokens(old)
    assert loss_backward_bytes(old, t) == 4 * fp32_logits_bytes(old, t) == 4 * 4 * 4096 * 128256
    assert loss_backward_bytes(new, t) == 3 * fp32_logits_bytes(new, t)
    chunked = dict(lm, loss_impl="chunked")  # torchtune's, which came with PyTorch 2: as it is
    old, new = config(**chunked, softmax_saves_input=True), config(**chunked)
    assert loss_backward_bytes(old, local_tokens(old)) == loss_backward_bytes(new, local_tokens(new))


def test_hf_bert_large_rows_of_january_2022_are_met():
    # data/golden/hardware.csv hf-bert-01..05 (nvidia-smi dated 2022-01-11: PyTorch before 1.11): within 3% each;
    # published.csv carries the same five figures, and memsim answers its copies as it answers these
    import csv

    from engine.ask.evaluate import evaluate_cases
    from engine.checks.hardware import compared_bytes, hardware_rows
    from engine.checks.validate import GOLDEN, config_of

    rows = [r for r in hardware_rows({"transformers"}) if r["case_id"].startswith("hf-bert-")]
    assert len(rows) == 5 and all(config_of(r)["softmax_saves_input"] == "true" for r in rows)
    results = evaluate_cases([config_of(r) for r in rows])
    for row, result in zip(rows, results, strict=True):
        measured = float(row["value_gib"]) * GIB
        assert abs(compared_bytes(row["metric"], result, measured) / measured - 1) < 0.03, row["case_id"]
    with open(GOLDEN, newline="") as f:
        published = {r["case_id"]: r for r in csv.DictReader(f)}
    copies = evaluate_cases([config_of(published[r["case_id"]]) for r in rows])
    assert [c["device_peak_bytes"] for c in copies] == [r["device_peak_bytes"] for r in results]


@pytest.mark.slow
def test_traced_steps_with_that_softmax_are_memsims():
    # A Llama-like decoder (eager attention, transformers' loss) traced with the node keeping its input and without:
    # memsim's allocated peak within 1% of each, and the bytes the node keeps within 1% of the traced difference
    from engine.cli.measure import measure_table

    lm = dict(model="custom", n_layers=4, d_model=1024, n_heads=16, d_ff=2816, vocab=32000, ffn_type="swiglu",
              optimizer="adamw", attention="eager", seq_len=1024, micro_batch=2)
    cases = [{**lm, **knobs, "softmax_saves_input": s} for knobs in ({"precision": "amp_bf16"},
             {"precision": "fp32", "dropout": 0.1}) for s in (True, False)]
    rows = measure_table(cases, "fake").to_pylist()
    for row in rows:
        measured, memsim = row["measured_allocated_peak_bytes"], row["allocated_peak_bytes"]
        assert abs(memsim / measured - 1) < 0.01, (row["precision"], row["softmax_saves_input"], memsim, measured)
    for old, new in (rows[0:2], rows[2:4]):
        traced = old["measured_allocated_peak_bytes"] - new["measured_allocated_peak_bytes"]
        modelled = old["allocated_peak_bytes"] - new["allocated_peak_bytes"]
        assert traced > 0.2 * GIB and abs(modelled / traced - 1) < 0.01, (old["precision"], modelled, traced)
