"""SimCLR's image augmentations (the paper's Appendix A; the authors' data_util.py).

The files, in the order a reader of the paper wants them:

| file | what |
|---|---|
| `recipe.py` | the recipe top to bottom: `random_crop_with_resize`, `random_flip`, one view (`preprocess_for_train`), the host's two views of an image (`two_views`), the step's views (`StepViews`: it takes the host's pair, or draws it on the device, then blurs it), the evaluation preprocessing (`preprocess_for_eval`) |
| `color.py` | colour distortion: `color_jitter` (brightness, contrast, saturation, hue in a random order), `to_grayscale`, `random_color_jitter` (p 0.8 and 0.2) |
| `blur.py` | Gaussian blur: `batch_random_blur`, in the train step on whole batches of views |
| `device.py` | the same recipe batched inside the train step (`--augment_on=device`): `make_view_fn` |
| `common.py` | the constants (crop area 0.08-1, aspect 3/4-4/3, probabilities), seeds, `random_apply` |

The recipe of one pretraining view, in order: (1) a random crop covering 10%-100% of
the area (the area range asked is 8%-100%, but the sampler's min_object_covered of 0.1
over the whole image sets a floor of 10%, in the authors' code as here) with aspect
ratio in [3/4, 4/3], resized bicubically; (2) a horizontal flip
with p 0.5; (3) colour jitter with p 0.8 (strength s: brightness 0.8s, contrast 0.8s,
saturation 0.8s, hue 0.2s, in a fresh random order, each clipped to [0, 1]) and,
independently, grayscale with p 0.2; (4) Gaussian blur with p 0.5 (sigma in [0.1, 2],
kernel 10% of the side). Steps 1-3 run per image in the input pipeline on the host
(`two_views`: `preprocess_for_train` twice per image, with independent seeds), or
batched on the device (`device.make_view_fn`); step 4 runs in the train step on whole
batches either way (`StepViews`), as in the reference: cheap on an accelerator,
expensive on the input host.

Every function takes float32 RGB images with values in [0, 1] (uint8 input is
converted by `to_float_image`) and returns them in [0, 1], but the crops
(`random_crop_with_resize`, `center_crop`): their bicubic resize overshoots [0, 1] and,
as in the authors' code, is not clipped there; the colour ops clip after themselves and
a view (or an evaluation image) is clipped once at its end. Nothing is ever mean/std
normalised, so exported models expect the same [0, 1] pixels. The functions work
eagerly, inside `tf.function` and inside `tf.data` maps.

Randomness: every random function takes `seed`, a stateless seed (int [2] tensor); the
same seed gives the same augmentation. With `seed=None` one seed is drawn by a stateful
op at the top of the call and split for the parts. Inside, only stateless ops run, with
seeds passed down explicitly. Why: a stateful random op inside a `tf.cond` branch gets
its op seed from the branch's own graph, so once `tf.random.set_seed` is called, every
identically built branch (the colour jitter of view 1 and of view 2, say) replays the
same random numbers: the two views would share their jitter. Measured on TF 2.21.

Names follow the SimCLR authors' `data_util.py` so their users find their way:
`preprocess_image`, `preprocess_for_train`, `preprocess_for_eval`,
`random_crop_with_resize`, `distorted_bounding_box_crop`, `center_crop`,
`color_jitter`, `color_jitter_rand`, `color_jitter_nonrand`, `random_brightness`,
`to_grayscale`, `random_color_jitter`, `gaussian_blur`, `random_blur`,
`batch_random_blur`, `random_apply`.

Example:
```python
view = preprocess_for_train(uint8_image, 224, 224, color_jitter_strength=1.0)
v1, v2 = batch_random_blur([views1, views2], 224, 224)  # in the train step
```
"""
from __future__ import annotations

# The package's face: every name below, from the file that defines it.
from simclr_tf.augment.common import (  # noqa: F401
    BLUR_PROBABILITY, BLUR_SIGMA_RANGE, COLOR_JITTER_PROBABILITY, CROP_AREA_RANGE,
    CROP_ASPECT_RATIO_RANGE, CROP_MAX_ATTEMPTS, CROP_MIN_OBJECT_COVERED,
    EVAL_CROP_PROPORTION, FLIP_PROBABILITY, GRAYSCALE_PROBABILITY, SMALL_IMAGE_MAX_SIZE,
    _check_impl, _check_size, _check_strength, _seeds, eval_center_crop_enabled,
    new_seed, random_apply, to_float_image)
from simclr_tf.augment.blur import (  # noqa: F401
    blur_kernel_size, gaussian_kernel_1d, gaussian_blur, random_blur,
    batch_random_blur)
from simclr_tf.augment.color import (  # noqa: F401
    color_jitter, color_jitter_nonrand, color_jitter_rand, random_brightness,
    random_color_jitter, to_grayscale)
from simclr_tf.augment.recipe import (  # noqa: F401
    StepViews, center_crop, crop_and_resize, distorted_bounding_box_crop,
    preprocess_for_eval, preprocess_for_train, preprocess_image, random_crop_with_resize,
    random_flip, two_views, view_seed)

__all__ = [
    "BLUR_PROBABILITY", "BLUR_SIGMA_RANGE", "COLOR_JITTER_PROBABILITY",
    "CROP_AREA_RANGE", "CROP_ASPECT_RATIO_RANGE", "CROP_MAX_ATTEMPTS",
    "CROP_MIN_OBJECT_COVERED", "EVAL_CROP_PROPORTION", "FLIP_PROBABILITY",
    "GRAYSCALE_PROBABILITY", "SMALL_IMAGE_MAX_SIZE", "batch_random_blur", "blur_kernel_size", "center_crop",
    "color_jitter", "color_jitter_nonrand", "color_jitter_rand", "crop_and_resize",
    "distorted_bounding_box_crop", "eval_center_crop_enabled", "gaussian_blur",
    "gaussian_kernel_1d", "new_seed", "preprocess_for_eval", "preprocess_for_train",
    "preprocess_image", "random_apply", "two_views", "view_seed", "StepViews",
    "random_blur", "random_brightness",
    "random_color_jitter", "random_crop_with_resize", "random_flip", "to_float_image",
    "to_grayscale",
]
