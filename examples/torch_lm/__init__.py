"""The parts of examples/torch_elastic_lm.py: the corpus and tokenizer, the model, the
state weft snapshots and migrates, and the report that compares two runs."""
