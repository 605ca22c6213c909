def apply(cfg):
    cfg.train.micro_batch_size = 1
