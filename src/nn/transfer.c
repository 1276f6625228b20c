/* Moving an encoder between models with different heads (a pretrained
 * masked LM into a new classifier). */
#include <math.h>
#include <string.h>

#include "attnctl/model.h"

/* The heads: tensors of one objective that the other lacks. */
static int is_head_tensor(const char *name)
{
    return strncmp(name, "head.", 5) == 0 || strncmp(name, "mlm.", 4) == 0;
}

int ac_model_copy_encoder(ac_model *dst, const ac_model *src, ac_err *err)
{
    int copied = 0;
    for (int i = 0; i < dst->n_tensors; i++) {
        const ac_param_info *d = &dst->table[i];
        if (is_head_tensor(d->name))
            continue;
        int j = ac_model_find_tensor(src, d->name);
        if (j < 0)
            return ac_err_set(err, "the pretrained model has no tensor \"%s\"", d->name);
        const ac_param_info *s = &src->table[j];
        if (s->ndim != d->ndim || s->shape[0] != d->shape[0] || s->shape[1] != d->shape[1])
            return ac_err_set(err, "tensor \"%s\": [%d, %d] in the pretrained model, [%d, %d] here",
                              d->name, s->shape[0], s->shape[1], d->shape[0], d->shape[1]);
        /* A poisoned encoder would fail at step 1 as if the learning rate
         * were too high: name the tensor instead. */
        const float *w = src->params + s->offset;
        for (size_t k = 0; k < d->numel; k++)
            if (!isfinite(w[k]))
                return ac_err_set(err, "tensor \"%s\" of the pretrained model holds NaN or "
                                       "infinite values", d->name);
        memcpy(dst->params + d->offset, w, d->numel * sizeof(float));
        copied++;
    }
    if (copied == 0)
        return ac_err_set(err, "the pretrained model shares no tensor with this one");
    return 0;
}
