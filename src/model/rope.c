/* rope.c — rotary-embedding inverse frequencies as transformers computes
 * them (float32), including Llama 3 "llama3" rope_scaling. */
#include <math.h>

#include "model/model.h"

void rope_inv_freq(const model_config *c, float *inv_freq) {
    int d = c->head_dim;
    for (int i = 0; i < d / 2; i++) {
        float e = (float)(2 * i) / (float)d;
        float f = (float)(1.0 / pow((double)(float)c->rope_theta, (double)e));
        if (c->rope_scaling == ROPE_SCALING_LLAMA3) {
            double factor = c->rope_factor, lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
            double old = c->rope_original_max_pos;
            double low_wl = old / lo, high_wl = old / hi;
            double wl = 2.0 * M_PI / f;
            float scaled = wl > low_wl ? (float)(f / factor) : f;
            if (!(wl < high_wl) && !(wl > low_wl)) {
                double smooth = (old / wl - lo) / (hi - lo);
                scaled = (float)((1.0 - smooth) * scaled / factor + smooth * scaled);
            }
            f = scaled;
        }
        inv_freq[i] = f;
    }
}
