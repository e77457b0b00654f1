"""VisualSphinx: the reader of its puzzles, the embedded puzzle generator and the binary reward."""
