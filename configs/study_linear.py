"""Study 2, the analogue of the paper's Fig. 3 (right): RoPE with linear attention, 3 seeds.

  python experiments/compare.py --config=configs/study_linear.py --workdir=runs/linear

Linear attention with φ = elu + 1 and no positions, learned absolute positions, RoPE in the
numerator only (eq 19), RoPE in numerator and denominator (eq 18), RoPE before φ (the
paper's Performer placement); and the normalized-cosine attention with RoPE. The shared
setting of configs/studies.py.
"""

from ml_collections import ConfigDict

from configs import studies


def _linear(position, placement="numerator"):
    linear = {"placement": placement}
    return {"model": {"attention": "linear", "position": position, "sections": {"linear": linear}}}


def get_config(arg=None):
    config = studies.get_config(arg)
    config.runs = ConfigDict(
        {
            "linear, none": _linear("none"),
            "linear, learned": _linear("learned"),
            "linear, RoPE numerator (eq 19)": _linear("rope", "numerator"),
            "linear, RoPE both (eq 18)": _linear("rope", "both"),
            "linear, RoPE before φ": _linear("rope", "before_feature_map"),
            "cosine, RoPE": {"model": {"attention": "cosine", "position": "rope"}},
        }
    )
    config.baseline = "linear, none"
    config.title = "MLM, linear attention (elu+1): where RoPE goes"
    return config
