"""Placement agents behind one small interface (`propose`, `learn`, `best_guess`): the hierarchical
grouper-placer, the colocation placer, random search and the cross-entropy method, the Baechi and
partitioner heuristics, the training loop, and the experiment runner with its command line."""
