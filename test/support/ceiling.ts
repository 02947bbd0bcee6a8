/**
 * Time limits in tests are ceilings against hangs, sized for the host. Inside the guests
 * (NETKIT_VM=1) one CPU runs the files, UML's kernel verifies and interprets every program
 * without a JIT, qemu emulates the CPU, and the other lane's guest shares the machine: what
 * takes a second here can take tens of seconds there. There the ceilings are three times
 * the host's; each guest run's own guard (the Makefile) still bounds the whole.
 */
export const inGuest = process.env.NETKIT_VM === "1";

export const ceiling = (ms: number): number => (inGuest ? 3 * ms : ms);
