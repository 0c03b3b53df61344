from setuptools import find_packages, setup

setup(
    name="vaswani_plugin",
    version="0.1.0",
    description='The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a fairseq plugin',
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["vaswani_plugin", "vaswani_plugin.*"]),
    python_requires=">=3.11,<3.13",  # ve-fairseq 0.12.3 has wheels for 3.11 and 3.12 only (tests/test_setup.py)
    # torch >= 2.4 for torch.get_autocast_dtype(device) (tests/test_gpu_paths_on_cpu.py pins this to the APIs
    # used). fairseq is an extra: ve-fairseq 0.12.3, the only fairseq the plugin is tested with (README).
    install_requires=["torch>=2.4"],
    extras_require={
        "fairseq": ["ve-fairseq==0.12.3"],
        # prepare/ and recipes/: tokenisation, BPE, word-pieces, scoring; attention pictures
        "recipes": ["sacremoses", "subword-nmt", "sentencepiece", "sacrebleu", "matplotlib"],
        "test": ["pytest"],
        # vaswani_plugin.serving.export_ctranslate2 / translate_ctranslate2: CTranslate2; imported only
        # there (and in benchmarks/speed.py), never by `import vaswani_plugin`.
        "ctranslate2": ["ctranslate2>=4.8.5,<5"],  # tested with 4.8.5
        # vaswani_plugin.serving.export_huggingface: transformers' MarianMTModel and FSMT/Marian tokenizers (which
        # need sacremoses and sentencepiece); imported only there and in benchmarks/huggingface_speed.py.
        # transformers 4 (4.57.6 tested) cannot give the decoder its own vocabulary size; 5.24.0 tested.
        "huggingface": ["transformers>=4.57,<6", "sacremoses", "sentencepiece"],
    },
)
