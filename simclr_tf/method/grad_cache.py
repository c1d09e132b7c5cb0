"""Gradient caching: a contrastive loss over a large batch with the memory of one chunk.

NT-Xent couples every view of the global batch, so the batch cannot simply be split
into micro-batches whose gradients are summed. Gradient caching (Gao et al. 2021,
"Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup") splits the
*backbone* work instead:

1. embeddings of every chunk, forward only, no tape: no activations are kept;
2. the loss over the whole batch from those embeddings, and its gradient with respect
   to the embeddings (and to the weights the loss reads directly, e.g. weight decay);
3. each chunk again, forward under a tape, back-propagating the cached embedding
   gradient (`output_gradients`, here as the surrogate sum(outputs * d_outputs)),
   accumulating the parameter gradients.

Peak activation memory is that of one chunk (steps 1 and 3 run in `tf.while_loop`s,
one chunk at a time); compute is one extra forward pass (~1.33x a normal step).

Loss and gradients equal the full-batch computation exactly when the forward of a
chunk does not depend on the other chunks. Batch normalisation does: in training mode
it normalises with the statistics of the batch it sees, so with gradient caching

- BN normalises each chunk with that chunk's statistics (like a per-replica batch of
  `chunk` examples; synchronised BN syncs them across replicas chunk by chunk), and
- the moving statistics are updated once per chunk (step 3), `num_chunks` times per
  step; step 1's updates are undone (`state_variables`), so they are not counted twice.

With one chunk (chunk = the batch) everything, BN included, equals the plain step
(tests/test_grad_cache.py).
"""
import tensorflow as tf

from simclr_tf.method import collectives
from simclr_tf.config import rules


def chunked_pair_gradients(views, chunk, make_views, forward, objective, variables, *,
                           output_names, draws_views=False, state_variables=()):
    """`cached_gradients` of a two-view batch, in chunks of `chunk` images.

    Chunk i holds images [i c, (i + 1) c) with both their views, as the plain
    step's batch holds both views of every image (BN sees pairs together).
    With `draws_views` (augmentation on the device: `views` are the source images)
    the views of a chunk are drawn from its source images inside each pass, so no
    more than one chunk's views ever exist: the step holds the (uint8) source batch,
    one chunk's activations and the cached embeddings. Both passes draw the same
    views (stateless seeds).

    Args:
        views: the batch's `(view1, view2)`, or its sources with `draws_views`.
        chunk: images per chunk; divides the batch.
        make_views: `make_views(views, chunk=None|i) -> (view1, view2)` (drawn and
            blurred; `chunk` the chunk's index, for its seeds).
        forward: `forward(images) -> {name: tensor}` on a chunk's [2c, ...] images.
        objective: `objective(first, second) -> (value, aux)`: `first[name]`,
            `second[name]` the outputs of every first / second view, [n, ...].
        variables, output_names, state_variables: as `cached_gradients`.

    Returns:
        `(aux, grads)`, as `cached_gradients`.
    """
    n = tf.nest.flatten(views)[0].shape[0]
    if n is None:
        raise ValueError("Gradient caching needs batches of a static size.")
    rules.check_grad_cache_chunk(chunk, n)
    num_chunks = n // chunk
    split = lambda x: tf.reshape(x, [num_chunks, chunk, *x.shape[1:]])  # noqa: E731
    if not draws_views:
        view1, view2 = (split(v) for v in make_views(views))

        def chunk_images(i):
            return tf.concat([view1[i], view2[i]], axis=0)
    else:
        sources = tf.nest.map_structure(split, views)

        def chunk_images(i):
            chunk_sources = tf.nest.map_structure(lambda x: x[i], sources)
            return tf.concat(make_views(chunk_sources, chunk=i), axis=0)

    def unchunk(stacked):
        # [k, 2c, ...] -> first views [n, ...], second views [n, ...]
        first = tf.reshape(stacked[:, :chunk], [n, *stacked.shape[2:]])
        second = tf.reshape(stacked[:, chunk:], [n, *stacked.shape[2:]])
        return first, second

    def stacked_objective(stacked):
        pairs = {name: unchunk(stacked[name]) for name in output_names}
        return objective({name: pair[0] for name, pair in pairs.items()},
                         {name: pair[1] for name, pair in pairs.items()})

    return cached_gradients(lambda i: forward(chunk_images(i)), num_chunks,
                            stacked_objective, variables, output_names=output_names,
                            state_variables=state_variables)


def cached_gradients(forward, num_chunks, objective, variables, *, output_names,
                     state_variables=(), unroll=None):
    """Gradients of `objective(forward(0) ... forward(num_chunks - 1))`, chunk by chunk.

    Args:
        forward: `forward(i) -> dict` of float tensors for chunk `i` (an int32 scalar
            tensor), each with the same shape for every chunk (e.g. z [2c, d]). It may
            update `state_variables` (BN moving statistics).
        num_chunks: int, how many chunks.
        objective: `objective(stacked) -> (value, aux)`; `stacked[name]` is
            float32 [num_chunks, ...], the outputs of every chunk. `value` is the
            scalar to differentiate; `aux` any nest of tensors returned as is. It may
            read `variables` directly (weight decay): those gradients are added.
        variables: the variables to differentiate with respect to.
        output_names: the keys of `forward`'s dict that `objective` reads.
        state_variables: variables that `forward` updates as a side effect (BN
            moving statistics); restored after the gradient-free pass so that they
            are updated only once per chunk.
        unroll: run the chunks as a Python loop (chained by control dependencies,
            so still one chunk at a time) instead of `tf.while_loop`. None: unroll
            exactly when there are several replicas, where BN's moving-statistics
            update (a cross-replica `merge_call`) cannot run inside a `while_loop`.
            The graph then holds 2 x num_chunks copies of the forward pass.

    Returns:
        `(aux, grads)`: grads a list aligned with `variables` (zeros, never None,
        for variables the objective does not reach).
    """
    if not isinstance(num_chunks, int) or num_chunks < 1:
        raise ValueError(f"num_chunks must be a positive int. Received: num_chunks={num_chunks!r}")
    output_names = tuple(output_names)
    variables = list(variables)
    state_variables = list(state_variables)

    def outputs_of(i):
        outputs = forward(i)
        missing = set(output_names) - set(outputs)
        if missing:
            raise ValueError(f"forward(i) lacks the outputs {sorted(missing)}. "
                             f"Received keys: {sorted(outputs)}")
        return [tf.cast(outputs[name], tf.float32) for name in output_names]

    if unroll is None:
        unroll = collectives.num_replicas_in_sync() > 1
    loop = _python_loop if unroll else _while_loop

    # 1. Embeddings without gradients, one chunk at a time.
    saved_state = [tf.identity(_read(v)) for v in state_variables]
    arrays = [tf.TensorArray(tf.float32, size=num_chunks, infer_shape=True)
              for _ in output_names]

    def embed(i, arrays):
        values = outputs_of(i)
        return [a.write(i, tf.stop_gradient(v)) for a, v in zip(arrays, values)]

    arrays = loop(embed, num_chunks, arrays)
    stacked = {name: a.stack() for name, a in zip(output_names, arrays)}
    with tf.control_dependencies([s for s in stacked.values()]):
        restores = [v.assign(s) for v, s in zip(state_variables, saved_state)]

    # 2. The loss over the whole batch; its gradient w.r.t. the embeddings and to
    #    the variables it reads directly.
    with tf.control_dependencies(restores):
        stacked = {name: tf.identity(value) for name, value in stacked.items()}
    with tf.GradientTape() as tape:
        tape.watch(list(stacked.values()))
        value, aux = objective(stacked)
    grads = tape.gradient(value, [stacked[name] for name in output_names] + variables)
    output_grads, direct_grads = grads[:len(output_names)], grads[len(output_names):]
    output_grads = [tf.zeros_like(stacked[name]) if g is None else g
                    for name, g in zip(output_names, output_grads)]
    direct_grads = _dense(direct_grads, variables)

    # 3. Each chunk again with a tape, back-propagating its slice of the cached
    #    gradient; parameter gradients accumulate in the loop carry.
    def backward(i, accumulated):
        with tf.GradientTape() as chunk_tape:
            values = outputs_of(i)
            surrogate = tf.add_n([tf.reduce_sum(v * tf.gather(d, i))
                                  for v, d in zip(values, output_grads)])
        chunk_grads = _dense(chunk_tape.gradient(surrogate, variables), variables)
        return [a + g for a, g in zip(accumulated, chunk_grads)]

    grads = loop(backward, num_chunks, direct_grads)
    return aux, list(grads)


def _while_loop(body, num_chunks, carry):
    """carry = body(i, carry) for i < num_chunks, one iteration at a time."""
    _, carry = tf.while_loop(lambda i, _: i < num_chunks,
                             lambda i, c: (i + 1, body(i, c)),
                             (tf.constant(0, tf.int32), carry), parallel_iterations=1)
    return carry


def _python_loop(body, num_chunks, carry):
    """The same, unrolled; each chunk starts after the previous one's results exist."""
    for i in range(num_chunks):
        with tf.control_dependencies(tf.nest.flatten(carry) if i else None):
            carry = body(tf.constant(i, tf.int32), carry)
    return carry


def _read(variable):
    """The current value of a (Keras or TF) variable as a tensor."""
    value = getattr(variable, "value", None)
    if value is not None and not callable(value):
        return value
    return tf.convert_to_tensor(variable)


def _dense(grads, variables):
    """Gradients as dense tensors, zeros where None (Keras variables have string dtypes,
    which `UnconnectedGradients.ZERO` cannot use)."""
    return [tf.zeros(v.shape, v.dtype) if g is None else tf.convert_to_tensor(g)
            for g, v in zip(grads, variables)]
