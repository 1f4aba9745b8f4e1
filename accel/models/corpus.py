"""Real-architecture corpus: torchvision (``tv:``), Hugging Face transformers (``hf:``), timm
(``timm:``) and diffusers (``diffusers:``) models at real (or stated small-config) sizes.

Random initialisation from code and configs, fixed seed, no downloads. Each entry carries the
input spec of its real size (``input_spec``) and a small one for fast tests (``small_spec``).
BatchNorm layers get running statistics from a few training-mode batches so that folding them
is a real test. Hugging Face models are built with ``use_cache=False`` (no cache objects out)
and return their ModelOutput as users get it; inputs are passed positionally in the spec's order.

Needs the ``corpus`` extra (``pip install 'accel-studio[corpus]'``): torchvision for ``tv:``
models, transformers for ``hf:`` models, timm (which imports torchvision) for ``timm:`` models,
diffusers for ``diffusers:`` models. A missing or broken package is a ModelLoadError that
names the package and the fix.

An entry with ``padding_mask`` names its attention-mask input: the corpus matrix also checks
each optimized model on a batch of padded rows of another sequence length (dynamic shapes as
they are used), not only on the spec's default sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accel.errors import ModelLoadError

SEED = 0
EXTRA_HINT = "pip install 'accel-studio[corpus]'"
# Model-source prefixes of the corpus (the loader, the plan and the trust check read these).
CORPUS_PREFIXES = ("tv:", "hf:", "timm:", "diffusers:")


@dataclass(frozen=True)
class CorpusEntry:
    name: str  # "tv:resnet50"
    description: str
    build: Callable[[], Any]
    input_spec: str
    small_spec: str  # smaller inputs of the same model, for fast tests
    task: str = "classification"
    has_batchnorm: bool = False
    # Re-initialise convolutions torchvision-style (see _cnn_init): for configs whose
    # fine-tuning init makes random-weight activations vanish into denormals.
    cnn_init: bool = False
    padding_mask: str = ""  # name of the attention-mask input checked with padded rows


def _torchvision():
    """Import torchvision or raise a ModelLoadError saying why it cannot be used and what to do."""
    try:
        import torchvision
    except ModuleNotFoundError:
        raise ModelLoadError(
            f"tv: models need torchvision, which is not installed; install the corpus extra: {EXTRA_HINT}"
        ) from None
    except Exception as exc:  # e.g. RuntimeError: operator torchvision::nms does not exist
        import torch

        raise ModelLoadError(
            f"tv: models need torchvision, which is installed but cannot be imported beside "
            f"torch {torch.__version__} ({type(exc).__name__}: {exc}). Install the torchvision "
            "build made for this torch (same version line and CPU/CUDA variant, e.g. from the "
            "same index URL as torch), then retry."
        ) from None
    return torchvision


def torchvision_error() -> str | None:
    """Why tv: models cannot load here (None when torchvision imports)."""
    try:
        _torchvision()
    except ModelLoadError as exc:
        return str(exc)
    return None


def _transformers():
    try:
        import transformers
    except ModuleNotFoundError:
        raise ModelLoadError(
            f"hf: models need transformers, which is not installed; install the corpus extra: {EXTRA_HINT}"
        ) from None
    except Exception as exc:
        raise ModelLoadError(
            f"hf: models need transformers, which cannot be imported ({type(exc).__name__}: {exc}); "
            f"reinstall it: {EXTRA_HINT}"
        ) from None
    return transformers


def _import_for(prefix: str, package: str) -> Any:
    """Import ``package`` for ``prefix`` models or raise a ModelLoadError saying why not."""
    import importlib

    try:
        return importlib.import_module(package)
    except ModuleNotFoundError as exc:
        missing = exc.name or package
        raise ModelLoadError(
            f"{prefix} models need {package}, and {missing} is not installed; install the "
            f"corpus extra: {EXTRA_HINT}"
        ) from None
    except Exception as exc:  # e.g. timm importing a torchvision built for another torch
        import torch

        raise ModelLoadError(
            f"{prefix} models need {package}, which is installed but cannot be imported beside "
            f"torch {torch.__version__} ({type(exc).__name__}: {str(exc).splitlines()[0]}). "
            + (
                "timm imports torchvision: install the torchvision build made for this torch "
                "(same version line and CPU/CUDA variant), then retry."
                if package == "timm"
                else f"Reinstall it: {EXTRA_HINT}"
            )
        ) from None


def package_error(prefix: str) -> str | None:
    """Why models of ``prefix`` ("timm:", "diffusers:", "tv:", "hf:") cannot load here."""
    package = {"timm:": "timm", "diffusers:": "diffusers", "tv:": "torchvision"}.get(
        prefix, "transformers"
    )
    try:
        _torchvision() if prefix == "tv:" else _import_for(prefix, package)
    except ModelLoadError as exc:
        return str(exc)
    return None


def _timm(name: str, **kwargs: Any) -> Callable[[], Any]:
    def build():
        timm = _import_for("timm:", "timm")
        return timm.create_model(name, pretrained=False, **kwargs)

    return build


def _diffusers(model_cls: str, part: str = "", **config: Any) -> Callable[[], Any]:
    """A diffusers model from a config; ``part="decoder"``: an AutoencoderKL's decoding path
    alone (post-quant conv, then the decoder), which is what a pipeline runs per image."""

    def build():
        diffusers = _import_for("diffusers:", "diffusers")
        model = getattr(diffusers, model_cls)(**config)
        if part == "decoder":
            import torch

            return torch.nn.Sequential(model.post_quant_conv, model.decoder)
        return model

    return build


def _detr(**config: Any) -> Callable[[], Any]:
    """DETR with the transformers ResNet-50 backbone (no timm, no pretrained download)."""

    def build():
        tr = _transformers()
        backbone = tr.ResNetConfig(out_features=["stage4"])
        cfg = tr.DetrConfig(
            use_timm_backbone=False,
            use_pretrained_backbone=False,
            backbone_config=backbone,
            **config,
        )
        return tr.DetrForObjectDetection(cfg)

    return build


def _tv(name: str, **kwargs: Any) -> Callable[[], Any]:
    def build():
        tv = _torchvision()
        return tv.models.get_model(name, weights=None, **kwargs)

    return build


def _hf(config_cls: str, model_cls: str, encoder_only: bool = False, **config: Any):
    def build():
        tr = _transformers()
        cfg = getattr(tr, config_cls)(**config)
        if hasattr(cfg, "use_cache"):
            cfg.use_cache = False
        model = getattr(tr, model_cls)(cfg)
        if encoder_only:
            model = model.get_encoder()
        return model

    return build


# The image classifiers' heads: ImageNet's 1000 classes, as the released checkpoints have
# (the configs' default of 2 labels would make a parity cosine over two logits).
IMAGENET_CLASSES = 1000

_IMG = "x:float32[batch,3,{s},{s}]; batch=1..64:1"
_PIX = "pixel_values:float32[batch,3,{s},{s}]; batch=1..64:1"


def _ids(vocab: int, low: int = 0, seq: int = 128, name: str = "input_ids") -> str:
    return f"{name}:int64[batch,seq]{{{low}..{vocab}}}; batch=1..32:1; seq=1..512:{seq}"


CORPUS: dict[str, CorpusEntry] = {
    e.name: e
    for e in (
        # -- torchvision ------------------------------------------------------------------
        CorpusEntry(
            "tv:resnet50",
            "torchvision ResNet-50 (25.6 M params)",
            _tv("resnet50"),
            _IMG.format(s=224),
            _IMG.format(s=64),
            has_batchnorm=True,
        ),
        CorpusEntry(
            "tv:mobilenet_v3_large",
            "torchvision MobileNetV3-Large (hardswish, squeeze-excitation)",
            _tv("mobilenet_v3_large"),
            _IMG.format(s=224),
            _IMG.format(s=64),
            has_batchnorm=True,
        ),
        CorpusEntry(
            "tv:efficientnet_b0",
            "torchvision EfficientNet-B0 (SiLU, squeeze-excitation, stochastic depth)",
            _tv("efficientnet_b0"),
            _IMG.format(s=224),
            _IMG.format(s=64),
            has_batchnorm=True,
        ),
        CorpusEntry(
            "tv:convnext_tiny",
            "torchvision ConvNeXt-T (depthwise 7x7, LayerNorm, layer scale)",
            _tv("convnext_tiny"),
            _IMG.format(s=224),
            _IMG.format(s=64),
        ),
        CorpusEntry(
            "tv:regnet_y_800mf",
            "torchvision RegNetY-800MF (group conv, squeeze-excitation)",
            _tv("regnet_y_800mf"),
            _IMG.format(s=224),
            _IMG.format(s=64),
            has_batchnorm=True,
        ),
        CorpusEntry(
            "tv:vit_b_16",
            "torchvision ViT-B/16 (86 M params, fixed 224x224 input)",
            _tv("vit_b_16"),
            _IMG.format(s=224),
            _IMG.format(s=224),
        ),
        CorpusEntry(
            "tv:swin_t",
            "torchvision Swin-T (shifted windows, relative position bias)",
            _tv("swin_t"),
            _IMG.format(s=224),
            _IMG.format(s=64),
        ),
        CorpusEntry(
            "tv:ssdlite320_mobilenet_v3_large",
            "torchvision SSDlite320 detector (list of dicts out, data-dependent NMS)",
            _tv("ssdlite320_mobilenet_v3_large", weights_backbone=None),
            "x:float32[batch,3,320,320]; batch=1..8:1",
            "x:float32[batch,3,320,320]; batch=1..8:1",
            task="detection",
            has_batchnorm=True,
        ),
        # -- Hugging Face transformers, from configs -----------------------------------------
        CorpusEntry(
            "hf:roberta_base",
            "RoBERTa-base size encoder (12 layers, hidden 768, 125 M params)",
            _hf("RobertaConfig", "RobertaModel"),
            _ids(50265, low=3),
            _ids(50265, low=3, seq=16),
            task="encoder",
        ),
        CorpusEntry(
            "hf:albert_base",
            "ALBERT-base (shared layer weights, factorised embeddings)",
            _hf(
                "AlbertConfig",
                "AlbertModel",
                hidden_size=768,
                num_attention_heads=12,
                intermediate_size=3072,
            ),
            _ids(30000),
            _ids(30000, seq=16),
            task="encoder",
        ),
        CorpusEntry(
            "hf:t5_small_encoder",
            "T5-small encoder alone (relative position bias, RMS-style layer norm)",
            _hf("T5Config", "T5EncoderModel"),
            _ids(32128),
            _ids(32128, seq=16),
            task="encoder",
        ),
        CorpusEntry(
            "hf:t5_small",
            "T5-small encoder-decoder with decoder inputs (60 M params)",
            _hf("T5Config", "T5ForConditionalGeneration"),
            "input_ids:int64[batch,seq]{0..32128}; attention_mask:int64[batch,seq]{1..2}; "
            "decoder_input_ids:int64[batch,dec]{0..32128}; batch=1..32:1; seq=1..512:128; "
            "dec=1..512:32",
            "input_ids:int64[batch,seq]{0..32128}; attention_mask:int64[batch,seq]{1..2}; "
            "decoder_input_ids:int64[batch,dec]{0..32128}; batch=1..32:1; seq=1..512:16; "
            "dec=1..512:8",
            task="seq2seq",
        ),
        CorpusEntry(
            "hf:opt_125m",
            "OPT-125m size decoder-only LM (12 layers, hidden 768, learned positions)",
            _hf("OPTConfig", "OPTForCausalLM"),
            _ids(50272, low=3),
            _ids(50272, low=3, seq=16),
            task="causal-lm",
        ),
        CorpusEntry(
            "hf:llama_small",
            "Llama architecture, small config (RMSNorm, rotary, grouped-query attention 8/2 heads)",
            _hf(
                "LlamaConfig",
                "LlamaForCausalLM",
                vocab_size=32000,
                hidden_size=512,
                intermediate_size=1376,
                num_hidden_layers=4,
                num_attention_heads=8,
                num_key_value_heads=2,
                max_position_embeddings=2048,
            ),
            _ids(32000),
            _ids(32000, seq=16),
            task="causal-lm",
        ),
        CorpusEntry(
            "hf:whisper_tiny_encoder",
            "Whisper-tiny encoder (conv front end, 4 layers, 30 s of 80-bin log-mel frames)",
            _hf(
                "WhisperConfig",
                "WhisperModel",
                encoder_only=True,
                d_model=384,
                encoder_layers=4,
                decoder_layers=4,
                encoder_attention_heads=6,
                decoder_attention_heads=6,
                encoder_ffn_dim=1536,
                decoder_ffn_dim=1536,
                num_mel_bins=80,
            ),
            # Whisper's encoder only takes exactly 3000 frames.
            "input_features:float32[batch,80,3000]; batch=1..16:1",
            "input_features:float32[batch,80,3000]; batch=1..16:1",
            task="audio-encoder",
        ),
        CorpusEntry(
            "hf:resnet50",
            "Hugging Face ResNet-50 (conv and BatchNorm in separate submodules)",
            _hf("ResNetConfig", "ResNetForImageClassification", num_labels=IMAGENET_CLASSES),
            _PIX.format(s=224),
            _PIX.format(s=64),
            has_batchnorm=True,
        ),
        CorpusEntry(
            "hf:mobilenet_v2",
            "Hugging Face MobileNetV2 1.0 (TF-style padding, ReLU6)",
            _hf(
                "MobileNetV2Config",
                "MobileNetV2ForImageClassification",
                num_labels=IMAGENET_CLASSES,
            ),
            _PIX.format(s=224),
            _PIX.format(s=64),
            has_batchnorm=True,
        ),
        CorpusEntry(
            "hf:regnet",
            "Hugging Face RegNet (default config: RegNetY-4GF-like, group conv, SE)",
            _hf("RegNetConfig", "RegNetForImageClassification", num_labels=IMAGENET_CLASSES),
            _PIX.format(s=224),
            _PIX.format(s=64),
            has_batchnorm=True,
        ),
        CorpusEntry(
            "hf:efficientnet_b0",
            "Hugging Face EfficientNet-B0 (depthwise conv, SE, BatchNorm)",
            _hf(
                "EfficientNetConfig",
                "EfficientNetForImageClassification",
                num_labels=IMAGENET_CLASSES,
                width_coefficient=1.0,
                depth_coefficient=1.0,
                image_size=224,
                dropout_rate=0.2,
                hidden_dim=1280,
            ),
            _PIX.format(s=224),
            _PIX.format(s=64),
            has_batchnorm=True,
        ),
        CorpusEntry(
            "hf:bert_base_padded",
            "BERT-base encoder fed padded batches: 4 rows, attention mask, variable sequence length",
            _hf("BertConfig", "BertModel"),
            "input_ids:int64[batch,seq]{1..30522}; attention_mask:int64[batch,seq]{1..2}; "
            "batch=1..32:4; seq=2..512:128",
            "input_ids:int64[batch,seq]{1..30522}; attention_mask:int64[batch,seq]{1..2}; "
            "batch=1..32:4; seq=2..512:16",
            task="encoder",
            padding_mask="attention_mask",
        ),
        CorpusEntry(
            "hf:wav2vec2_base",
            "wav2vec2-base size speech encoder (7-layer conv feature extractor, 12 layers, 94 M params)",
            _hf("Wav2Vec2Config", "Wav2Vec2Model"),
            "input_values:float32[batch,samples]{-1..1}; batch=1..8:1; samples=4000..160000:16000",
            "input_values:float32[batch,samples]{-1..1}; batch=1..8:1; samples=4000..160000:4000",
            task="audio-encoder",
        ),
        CorpusEntry(
            "hf:detr_resnet50",
            "DETR detector (ResNet-50 backbone, 6+6 transformer layers, 100 object queries, 41.6 M)",
            _detr(num_labels=91),
            "pixel_values:float32[batch,3,512,512]; batch=1..8:1",
            "pixel_values:float32[batch,3,128,128]; batch=1..8:1",
            task="detection",
            cnn_init=True,
        ),
        # -- timm (imports torchvision) ------------------------------------------------------
        CorpusEntry(
            "timm:convnext_tiny",
            "timm ConvNeXt-T (depthwise 7x7, LayerNorm2d, layer scale; 28.6 M params)",
            _timm("convnext_tiny"),
            _IMG.format(s=224),
            _IMG.format(s=64),
        ),
        CorpusEntry(
            "timm:efficientnet_b0",
            "timm EfficientNet-B0 (BatchNormAct2d, SiLU, squeeze-excitation)",
            _timm("efficientnet_b0"),
            _IMG.format(s=224),
            _IMG.format(s=64),
            has_batchnorm=True,
        ),
        CorpusEntry(
            "timm:deit_small_patch16_224",
            "timm DeiT-S/16 vision transformer (22 M params, fixed 224x224 input)",
            _timm("deit_small_patch16_224"),
            _IMG.format(s=224),
            _IMG.format(s=224),
        ),
        CorpusEntry(
            "timm:swin_tiny_patch4_window7_224",
            "timm Swin-T (shifted window attention, fixed 224x224 input; 28 M params)",
            _timm("swin_tiny_patch4_window7_224"),
            _IMG.format(s=224),
            _IMG.format(s=224),
        ),
        # -- diffusers, from small configs ---------------------------------------------------
        CorpusEntry(
            "diffusers:unet2d_condition",
            "Stable-Diffusion-style UNet2DConditionModel, small config (64/128/256 channels, "
            "cross-attention to text embeddings of 256 dims)",
            _diffusers(
                "UNet2DConditionModel",
                sample_size=32,
                block_out_channels=(64, 128, 256),
                layers_per_block=2,
                down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
                cross_attention_dim=256,
                attention_head_dim=8,
            ),
            "sample:float32[batch,4,32,32]; timestep:int64[batch]{0..1000}; "
            "encoder_hidden_states:float32[batch,77,256]; batch=1..8:1",
            "sample:float32[batch,4,16,16]; timestep:int64[batch]{0..1000}; "
            "encoder_hidden_states:float32[batch,8,256]; batch=1..8:1",
            task="denoiser",
        ),
        CorpusEntry(
            "diffusers:vae_decoder",
            "AutoencoderKL decoding path, small config (32-128 channels, GroupNorm, mid-block "
            "attention): 4-channel latents to an image 8x larger",
            _diffusers(
                "AutoencoderKL",
                part="decoder",
                block_out_channels=(32, 64, 128, 128),
                down_block_types=("DownEncoderBlock2D",) * 4,
                up_block_types=("UpDecoderBlock2D",) * 4,
                latent_channels=4,
                layers_per_block=2,
            ),
            "z:float32[batch,4,32,32]; batch=1..8:1",
            "z:float32[batch,4,8,8]; batch=1..8:1",
            task="decoder",
        ),
    )
}


def _decoder_entries() -> dict[str, CorpusEntry]:
    from accel.models.corpus_decoders import DECODERS

    return {
        d.name: CorpusEntry(
            d.name,
            d.description,
            _hf(d.config_cls, d.model_cls, vocab_size=d.vocab, **d.config),
            _ids(d.vocab),
            _ids(d.vocab, seq=16),
            task="causal-lm",
        )
        for d in DECODERS
    }


CORPUS.update(_decoder_entries())


def corpus_names() -> list[str]:
    return list(CORPUS)


def get_entry(name: str) -> CorpusEntry:
    if name not in CORPUS:
        family = name.split(":", 1)[0] + ":"
        valid = [n for n in CORPUS if n.startswith(family)] or list(CORPUS)
        raise ModelLoadError(f"unknown corpus model {name!r}; valid: {', '.join(valid)}")
    return CORPUS[name]


def _warm_batchnorm(model: Any, spec_text: str) -> None:
    """Give BatchNorm layers non-trivial running statistics (a few small training batches)."""
    import torch

    from accel.models.inputs import InputSpec

    spec = InputSpec.parse(spec_text)
    model.train()
    with torch.no_grad():
        for i in range(3):
            x = spec.sample(seed=100 + i, dims={"batch": 4})
            model(*x.values())
    model.eval()


def _cnn_init(model: Any) -> None:
    """torchvision's CNN initialisation (Kaiming fan-out convs, unit BatchNorm, small Linear).

    The Hugging Face CNNs use a normal(0, 0.02) init meant for fine-tuning from checkpoints;
    from random weights their activations shrink layer by layer into float32 denormals, which
    makes CPU kernels 100x slower and every timing meaningless."""
    from torch import nn

    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.modules.batchnorm._BatchNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def build_corpus_model(name: str) -> Any:
    """Build corpus model ``name`` with a fixed seed (same weights every time), in eval mode."""
    import torch

    entry = get_entry(name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = entry.build()
        if entry.cnn_init or (name.startswith("hf:") and entry.has_batchnorm):
            _cnn_init(model)
        if entry.has_batchnorm and entry.task == "classification":
            _warm_batchnorm(model, entry.small_spec)
    return model.eval()
