/* SPDX-License-Identifier: Apache-2.0 */
/*
 * binder-lab: the kernel's binder UAPI as libbinder expects to see it on Android.
 *
 * libbinder is built against bionic's copy of the UAPI (bionic/libc/kernel/android/uapi),
 * which is not in Debian. Two differences matter:
 * - upstream's header declares the ioctls and return codes as enum constants, so the
 *   `#ifndef BINDER_FREEZE`-style fallbacks in binder_module.h would define the structs a
 *   second time; naming them as macros here tells it they exist;
 * - Android's kernels have scheduler-policy bits in flat_binder_object.flags that upstream
 *   does not (the driver ignores them there: a node's policy stays the default).
 */
#ifndef BINDER_LAB_LINUX_ANDROID_BINDER_H
#define BINDER_LAB_LINUX_ANDROID_BINDER_H

#include_next <linux/android/binder.h>

#define BINDER_FREEZE BINDER_FREEZE
#define BINDER_GET_FROZEN_INFO BINDER_GET_FROZEN_INFO
#define BINDER_ENABLE_ONEWAY_SPAM_DETECTION BINDER_ENABLE_ONEWAY_SPAM_DETECTION
#define BR_FROZEN_REPLY BR_FROZEN_REPLY
#define BR_ONEWAY_SPAM_SUSPECT BR_ONEWAY_SPAM_SUSPECT
#define BR_TRANSACTION_PENDING_FROZEN BR_TRANSACTION_PENDING_FROZEN

/* Android Common Kernel only: the node's scheduling policy and whether it inherits RT. */
#define FLAT_BINDER_FLAG_SCHED_POLICY_SHIFT 9
#define FLAT_BINDER_FLAG_SCHED_POLICY_MASK (3U << FLAT_BINDER_FLAG_SCHED_POLICY_SHIFT)
#define FLAT_BINDER_FLAG_INHERIT_RT 0x800

#endif
