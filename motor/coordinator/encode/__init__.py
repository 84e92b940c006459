"""The encode (E) leg's pure parts: a chat request's multimodal items (media.py), image sizes read from the
headers of data URLs (image_size.py) and the E load score they add up to (score.py)."""
