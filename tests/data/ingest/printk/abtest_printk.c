// SPDX-License-Identifier: GPL-2.0
/* Emits trace_printk() lines (bprint and bputs events) so that a real capture of them can be recorded. */
#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/timer.h>
#include <linux/jiffies.h>
#include <linux/sched.h>

static struct timer_list tick;
static int ticks;

static void on_tick(struct timer_list *t)
{
	trace_printk("[+] tick:%d cpu:%d state:%u\n", ticks, smp_processor_id(), READ_ONCE(current->__state));
	if (++ticks < 40)
		mod_timer(&tick, jiffies + msecs_to_jiffies(5));
}

static int __init abtest_printk_init(void)
{
	int i;

	trace_printk("abtest_printk loaded\n");
	for (i = 0; i < 10; i++)
		trace_printk("init step %d of %d, comm=%s pid=%d\n", i, 10, current->comm, current->pid);
	timer_setup(&tick, on_tick, 0);
	mod_timer(&tick, jiffies + msecs_to_jiffies(5));
	return 0;
}

static void __exit abtest_printk_exit(void)
{
	del_timer_sync(&tick);
	trace_printk("abtest_printk unloaded after %d ticks\n", ticks);
}

module_init(abtest_printk_init);
module_exit(abtest_printk_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("trace_printk emitter for abtest's ingestion tests");
