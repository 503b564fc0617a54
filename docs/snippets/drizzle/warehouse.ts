export async function requestShipment(
  orderId: number,
  idempotencyKey: string,
): Promise<{ trackingNumber: string }> {
  const res = await fetch(`${process.env.WAREHOUSE_URL}/shipments`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
    body: JSON.stringify({ orderId }),
  });
  return (await res.json()) as { trackingNumber: string };
}
