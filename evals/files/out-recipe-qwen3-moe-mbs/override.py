def apply(cfg):
    cfg.train.micro_batch_size = 4
    cfg.train.global_batch_size = 32
