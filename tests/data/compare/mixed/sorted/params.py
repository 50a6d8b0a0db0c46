dat_path = 'recording.bin'
n_channels_dat = 4
dtype = 'int16'
offset = 0
sample_rate = 30000.0
hp_filtered = True
