"""Serving a trained model: CTranslate2 export and translation, and the loader and text pipeline they share."""
