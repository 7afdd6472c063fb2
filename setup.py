"""roformer_jax: Rotary Position Embedding (RoPE) and the RoFormer encoder in JAX/Flax."""

from setuptools import find_packages, setup

setup(
    name="roformer_jax",
    version="0.1.0",
    description="RoPE, RoPE-compatible linear attention and the RoFormer encoder in JAX/Flax",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["roformer_jax", "roformer_jax.*"]),
    python_requires=">=3.10",
    # Lower bounds are the versions the test suite was run with.
    install_requires=[
        "jax>=0.10.2",
        "flax>=0.12.8",
        "optax>=0.2.8",
        "orbax-checkpoint>=0.12.8",
        "chex>=0.1.92",
        "numpy>=2.0",
        "scipy>=1.11",
        "absl-py>=2.1",
        "ml_collections>=1.1.0",
        "tokenizers>=0.23",
        "safetensors>=0.8",
        "matplotlib>=3.8",
        "tensorboardX>=2.6",
    ],
    extras_require={
        # pytest-xdist: the suite runs on every core (-n auto); most tests compile on one.
        # torch and transformers: the HF comparisons (hf_test, rope_scaling_test, bert_parity_test,
        # vs_hf_test), which skip without them. torch==2.13.0 names the CPU build on our machines;
        # any other torch spec pulls CUDA packages.
        # scikit-learn: the ViT study's digits (tests/vit_test.py runs it at runlocal size).
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.5",
            "torch==2.13.0",
            # 5.9 to 5.17's RoFormerForCausalLM attends to later tokens (tests/hf_test.py).
            "transformers>=5.18",
            "scikit-learn>=1.4",
        ],
        # The ViT study (experiments/vit_study.py): its images ship inside scikit-learn.
        "vision": ["scikit-learn>=1.4"],
        "hf": ["transformers>=4.40"],
        "datasets": ["datasets>=2.18"],
    },
)
