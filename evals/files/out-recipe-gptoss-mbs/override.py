def apply(cfg):
    cfg.train.micro_batch_size = 2
    cfg.train.global_batch_size = 128
