"""Learned models of the tuners (scikit-learn style ``fit``/``predict``): AutoTVM's XGBoost cost model
(:mod:`.cost`), ML2Tuner's ModelA on compile-time features (:mod:`.advanced`) and ModelV (:mod:`.validity`)."""
