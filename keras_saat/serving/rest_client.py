"""RestClient: captions from a model behind TF Serving's REST API (or `keras-saat serve`)."""

import base64
import json
import urllib.error
import urllib.request

import numpy as np

from keras_saat.errors import KerasSaatError
from keras_saat.serving.captions import captions_from_outputs, read_images
from keras_saat.serving.signatures import PIXELS_SIGNATURE


class RestClient:
    """Calls `POST /v1/models/NAME[/versions/N]:predict` with base64-encoded images;
    needs only the standard library and NumPy.

    Args:
        url: str. The server, e.g. "http://localhost:8501". Defaults to that.
        model: str. The served model's name. Defaults to "keras_saat".
        version: int or None. A version to pin; None = the server's latest. Defaults to None.
        timeout: float. Seconds per request. Defaults to 60.

    Example:
        ```python
        from keras_saat.serving import RestClient

        client = RestClient("http://localhost:8501", "keras_saat")
        client.caption(["photo.jpg"])  # one dict per image: caption, words, attention
        ```
    """

    def __init__(self, url="http://localhost:8501", model="keras_saat", version=None, timeout=60.0):
        self.url = url.rstrip("/")
        self.model = model
        self.version = version
        self.timeout = float(timeout)

    @property
    def model_url(self):
        path = f"{self.url}/v1/models/{self.model}"
        return f"{path}/versions/{self.version}" if self.version is not None else path

    def _request(self, url, body=None):
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as err:
            try:
                message = json.loads(err.read()).get("error", "")
            except ValueError:
                message = ""
            raise KerasSaatError(
                f"{url} answered HTTP {err.code}: {message or err.reason}"
            ) from None
        except urllib.error.URLError as err:
            raise KerasSaatError(f"cannot reach {url}: {err.reason}") from None

    def status(self):
        """The model's version status (`GET /v1/models/NAME`)."""
        return self._request(self.model_url)

    def metadata(self):
        """The model's signatures (`GET /v1/models/NAME/metadata`)."""
        return self._request(f"{self.model_url}/metadata")

    def predict(self, body):
        """Posts a raw request body (a dict) to `:predict` and returns the parsed answer."""
        return self._request(f"{self.model_url}:predict", body)

    def caption(self, images, columnar=False):
        """Captions encoded images.

        Args:
            images: a path, bytes, or a list of them (JPEG, PNG, GIF or BMP files).
            columnar: bool. Send the columnar `inputs` format instead of row `instances`.
                Defaults to False.

        Returns:
            list of dict per image: caption, tokens, log_prob, attention (n_tokens,
            grid_h, grid_w), valid and error (see `captions.captions_from_outputs`).
        """
        encoded = [{"b64": base64.b64encode(b).decode("ascii")} for b in read_images(images)]
        if not encoded:  # no images, no request
            return []
        if columnar:
            outputs = self.predict({"inputs": {"image_bytes": encoded}})["outputs"]
        else:
            rows = self.predict({"instances": encoded})["predictions"]
            outputs = {key: [row[key] for row in rows] for key in rows[0]} if rows else {}
        return captions_from_outputs(outputs)

    def caption_pixels(self, pixels):
        """Captions float RGB pixels (B, H, W, 3) in [0, 255] through `serving_pixels`."""
        pixels = np.asarray(pixels, np.float32)
        body = {"signature_name": PIXELS_SIGNATURE, "inputs": {"pixels": pixels.tolist()}}
        return captions_from_outputs(self.predict(body)["outputs"])
