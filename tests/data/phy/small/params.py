dat_path = 'rec.bin'
n_channels_dat = 5
dtype = 'int16'
offset = 0
sample_rate = 30000.0
hp_filtered = False
