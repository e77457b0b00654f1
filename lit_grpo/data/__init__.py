"""Data: the Sample record, readers, generators of embedded data, prompt templates, the DataModule."""

from lit_grpo.data.datamodule import GENERATORS, READERS, DatasetSpec, PromptBatch, VLMDataModule
from lit_grpo.data.images import decode_image
from lit_grpo.data.sample import TEMPLATES, BadRowError, Sample, SampleDataset, render_messages

__all__ = ["BadRowError", "DatasetSpec", "GENERATORS", "PromptBatch", "READERS", "Sample", "SampleDataset",
           "TEMPLATES", "VLMDataModule", "decode_image", "render_messages"]
