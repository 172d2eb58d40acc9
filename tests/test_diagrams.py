"""The architecture diagrams in bertlib.course.plots: each draws what it says, with a title, and refuses bad input."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from bertlib.course import plots  # noqa: E402


def texts(fig) -> str:
    """Every string drawn on the figure (box labels, titles, legend entries), joined."""
    found = [t.get_text() for t in fig.findobj(matplotlib.text.Text)]
    return "\n".join(found)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_input_representation_draws_one_column_per_token_with_its_segment():
    fig = plots.input_representation_diagram(["[CLS]", "hi", "[SEP]", "yo", "[SEP]"], [0, 0, 0, 1, 1])
    drawn = texts(fig)
    assert "E[hi]" in drawn and "E_4" in drawn and drawn.count("E_A") == 3 and drawn.count("E_B") == 2
    assert fig.axes[0].get_title()


@pytest.mark.parametrize("tokens, segments", [(["a", "b"], [0]), ([], []), (["a"], [2])])
def test_input_representation_refuses_mismatched_segments(tokens, segments):
    with pytest.raises(ValueError, match="segment"):
        plots.input_representation_diagram(tokens, segments)


def test_encoder_layer_is_post_ln_attention_first():
    drawn = texts(plots.encoder_layer_diagram())
    order = [drawn.index(step) for step in ("input x", "multi-head self-attention", "feed-forward", "output")]
    assert order == sorted(order) and drawn.count("add & LayerNorm") == 2 and drawn.count("residual") == 2


def test_stack_names_its_layers_and_both_heads():
    drawn = texts(plots.bert_stack_diagram(num_layers=6))
    assert "encoder layer x 6" in drawn and "NSP head" in drawn and "decoder = word embeddings^T" in drawn
    with pytest.raises(ValueError):
        plots.bert_stack_diagram(0)


def test_multihead_shapes_follow_the_arguments():
    drawn = texts(plots.multihead_diagram(seq_len=5, hidden=8, num_heads=2))
    assert "(2, 5, 4)" in drawn and "(5, 8)" in drawn
    with pytest.raises(ValueError, match="multiple"):
        plots.multihead_diagram(hidden=10, num_heads=3)


def test_mlm_masking_colours_each_chosen_token_by_what_it_became():
    fig = plots.mlm_masking_diagram(["the", "cat", "sat", "down"], ["the", "[MASK]", "dog", "down"],
                                    [-100, 7, 8, 9])
    boxes = [matplotlib.colors.to_hex(patch.get_facecolor()) for patch in fig.axes[0].patches]
    model_input = boxes[1::2]  # boxes come in (original, model input) pairs, left to right
    assert model_input == [plots._COLOURS[k] for k in ("plain", "mask", "random", "keep")]
    with pytest.raises(ValueError, match="one entry per position"):
        plots.mlm_masking_diagram(["a"], ["a", "b"], [-100])


def test_mlm_masking_wraps_a_long_sentence_into_rows_of_the_same_width():
    tokens = [f"w{k}" for k in range(40)]
    fig = plots.mlm_masking_diagram(tokens, tokens, [-100] * 40, per_row=16)
    width, height = fig.get_size_inches()
    assert width == 16 + 1.8 and height == 3 * 2.4 + 0.9  # 40 tokens: rows of 16, 16 and 8
    assert texts(fig).count("model input") == 3 and "w39" in texts(fig)
    short = plots.mlm_masking_diagram(tokens[:5], tokens[:5], [-100] * 5)
    assert short.get_size_inches()[0] == 5 + 1.8


def test_classification_head_has_one_sigmoid_per_label():
    drawn = texts(plots.classification_head_diagram(["toxic", "threat", "insult"]))
    assert drawn.count("sigmoid") == 3 and "threat" in drawn
    with pytest.raises(ValueError):
        plots.classification_head_diagram([])
