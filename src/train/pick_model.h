#ifndef ATTNCTL_PICK_MODEL_H
#define ATTNCTL_PICK_MODEL_H

/* The model a run of members keeps, from validation accuracies: -1 for the
 * members' mean, or the best member's index (the first of equals) when the
 * mean reads below every member: the members then left the basin they
 * started in, and their mean is a model of none of them (measured on the
 * course's max-pooled preset: .7920 against members' .8268-.8396). */
int trainer_pick_model(double mean_accuracy, const double *member_accuracy, int members);

#endif
