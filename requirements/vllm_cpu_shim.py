"""Installed into the CPU vLLM venv by ``make vllm-venv`` (with ``vllm_cpu_shim.pth``, which
imports it at every interpreter start, vLLM's subprocesses included) so that vLLM's CPU build
can serve Qwen2-VL and Qwen2.5-VL models, images and all, without torchvision.

Why: no torchvision wheel loads beside the CPU build of torch 2.13 (PyPI's link torch's CUDA
libraries), so ``make vllm-venv`` removes it; transformers then has no video processors (they
are torchvision code), and with them goes every Qwen2-VL processor, image-only use included,
and the module vLLM imports ``smart_resize`` from. When torchvision is absent this:

- resolves ``image_processing_qwen2_vl`` to ``image_processing_pil_qwen2_vl`` (the same
  ``smart_resize``; the PIL image processor, which transformers itself falls back to);
- builds the two processors from the PIL image processor, the tokenizer and ``NoVideos``, a
  stand-in that answers the sizes vLLM reads and refuses to process a video.

Images go through exactly the code they would with torchvision, but for resizing with PIL
instead. With torchvision present (any GPU install) this does nothing.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

TORCHVISION_MODULE = "transformers.models.qwen2_vl.image_processing_qwen2_vl"
PIL_MODULE = "transformers.models.qwen2_vl.image_processing_pil_qwen2_vl"
PROCESSOR_MODULES = {
    "transformers.models.qwen2_vl.processing_qwen2_vl": "Qwen2VLProcessor",
    "transformers.models.qwen2_5_vl.processing_qwen2_5_vl": "Qwen2_5_VLProcessor",
}


class NoVideoOptions:
    """A video processor's options (``valid_kwargs``): none."""


class NoVideos:
    """The video processor slot of a processor that only ever sees images."""

    valid_kwargs = NoVideoOptions

    def __init__(self, image_processor: object) -> None:
        for name in ("merge_size", "patch_size", "temporal_patch_size", "min_pixels", "max_pixels"):
            setattr(self, name, getattr(image_processor, name, None))
        self.size = getattr(image_processor, "size", None)

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("videos need torchvision, which this vLLM environment lacks")

    def to_dict(self) -> dict:
        return {}


def _without_videos(processor_class: type) -> None:
    check = processor_class.check_argument_for_proper_class

    def check_argument(self, name, argument):
        if name == "video_processor" and isinstance(argument, NoVideos):
            return NoVideos
        return check(self, name, argument)

    def from_pretrained(cls, path, *args, **kwargs):
        from transformers import AutoTokenizer

        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
            Qwen2VLImageProcessorPil,
        )

        options = {k: kwargs[k] for k in ("revision", "trust_remote_code") if k in kwargs}
        images = Qwen2VLImageProcessorPil.from_pretrained(path, **options)
        tokenizer = AutoTokenizer.from_pretrained(path, **options)
        return cls(images, tokenizer, NoVideos(images), chat_template=tokenizer.chat_template)

    processor_class.check_argument_for_proper_class = check_argument
    processor_class.from_pretrained = classmethod(from_pretrained)


class _PilModule(importlib.abc.Loader):
    """``image_processing_qwen2_vl`` as the PIL processor's module."""

    def create_module(self, spec):
        module = importlib.import_module(PIL_MODULE)
        if not hasattr(module, "Qwen2VLImageProcessor"):
            module.Qwen2VLImageProcessor = module.Qwen2VLImageProcessorPil
        return module

    def exec_module(self, module):
        pass


class _PatchedAfterLoading(importlib.abc.Loader):
    """The module's own loader, then the processor class made to work without videos."""

    def __init__(self, real: importlib.abc.Loader, class_name: str) -> None:
        self.real, self.class_name = real, class_name

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        self.real.exec_module(module)
        _without_videos(getattr(module, self.class_name))


class _WithoutTorchvision(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != TORCHVISION_MODULE and name not in PROCESSOR_MODULES:
            return None
        if importlib.util.find_spec("torchvision") is not None:
            return None
        if name == TORCHVISION_MODULE:
            return importlib.util.spec_from_loader(name, _PilModule())
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            spec.loader = _PatchedAfterLoading(spec.loader, PROCESSOR_MODULES[name])
        return spec


if not any(isinstance(finder, _WithoutTorchvision) for finder in sys.meta_path):
    sys.meta_path.insert(0, _WithoutTorchvision())
